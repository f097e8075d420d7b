package cni_test

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/vishvananda/netlink"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// setReady writes ClusterInformation's datastoreReady, as `calicoctl
// datastore migrate lock` and `unlock` do.
func (e *env) setReady(ready bool) {
	e.t.Helper()
	ci := &api.ClusterInformation{}
	ci.Kind, ci.APIVersion, ci.Name = "ClusterInformation", api.GroupVersion, "default"
	if o, err := e.store.Get(e.ctx, "ClusterInformation", "", "default"); err == nil {
		ci = o.(*api.ClusterInformation)
	} else if !errors.Is(err, datastore.ErrNotFound) {
		e.t.Fatal(err)
	}
	ci.Spec.ClusterGUID, ci.Spec.DatastoreReady = "0123456789abcdef0123456789abcdef", &ready
	if _, err := e.store.Apply(e.ctx, ci); err != nil {
		e.t.Fatal(err)
	}
}

// TestLockedDatastore: while a migration has the datastore locked, ADD
// and DEL fail as Calico's plugin fails them and change nothing in the
// datastore, so that the migration's copy stays true; after the unlock
// both work.
func TestLockedDatastore(t *testing.T) {
	e := newEnv(t)
	e.addPool("v4", "10.244.0.0/16", 26)
	conf := e.conf("1.0.0", nil)
	running := newPod(t)
	addrs := podAddrs(t, e.mustAdd(conf, running))
	runningHandle := "k8s-pod-network." + running.rt.ContainerID

	e.setReady(false)
	notReady := func(what string, err error) {
		t.Helper()
		var cniErr *types.Error
		if !errors.As(err, &cniErr) || cniErr.Code != types.ErrTryAgainLater || cniErr.Msg != "Calico is currently not ready to process requests" {
			t.Errorf("%s on a locked datastore: %v, want Calico's not-ready error (code %d)", what, err, types.ErrTryAgainLater)
		}
	}
	p := newPod(t)
	_, err := e.add(conf, p)
	notReady("ADD", err)
	if held := e.heldBy("k8s-pod-network." + p.rt.ContainerID); len(held) != 0 {
		t.Errorf("refused ADD allocated %v", held)
	}
	if eps := e.endpointsOf(p.rt.ContainerID); len(eps) != 0 {
		t.Errorf("refused ADD wrote endpoint %s", eps[0].Name)
	}
	if _, err := netlink.LinkByName("cali" + p.rt.ContainerID); err == nil {
		t.Errorf("refused ADD left its host veth")
	}
	notReady("DEL", e.del(conf, running))
	var held []netip.Prefix
	for _, a := range e.heldBy(runningHandle) {
		held = append(held, netip.PrefixFrom(a, a.BitLen()))
	}
	if !slices.Equal(held, addrs) || len(e.endpointsOf(running.rt.ContainerID)) != 1 {
		t.Errorf("refused DEL released addresses (%v, had %v) or deleted the endpoint", held, addrs)
	}

	e.setReady(true)
	if got := podAddrs(t, e.mustAdd(conf, p)); len(got) != 1 || got[0] == addrs[0] {
		t.Errorf("ADD after the unlock: %v", got)
	}
	e.mustDel(conf, running)
	e.assertNothingLeft("k8s-pod-network", running, "cali"+running.rt.ContainerID)
	e.mustDel(conf, p)
}
