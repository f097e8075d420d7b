package controllers

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// kcc is KubeControllersConfiguration "default" as Calico creates it,
// changed by mod.
func kcc(mod func(*api.KubeControllersConfigurationSpec)) *api.KubeControllersConfiguration {
	k := &api.KubeControllersConfiguration{}
	k.Kind, k.APIVersion, k.Name = "KubeControllersConfiguration", api.GroupVersion, "default"
	k.Spec = *calicoDefaultKCC()
	mod(&k.Spec)
	return k
}

// setKCC changes the stored KubeControllersConfiguration "default".
func (e *env) setKCC(t *testing.T, mod func(*api.KubeControllersConfigurationSpec)) {
	t.Helper()
	o, err := e.get("KubeControllersConfiguration", "", "default")
	if err != nil {
		t.Fatal(err)
	}
	k := o.(*api.KubeControllersConfiguration)
	mod(&k.Spec)
	if _, err := e.store.Update(e.ctx, k); err != nil {
		t.Fatalf("update KubeControllersConfiguration: %v", err)
	}
}

// hepIs checks a host endpoint's interface, expected addresses, labels
// and profile.
func (e *env) hepIs(name, node, iface string, ips []string, labels map[string]string) func() error {
	want := maps.Clone(labels)
	want[AutoHEPCreatedByLabel] = AutoHEPCreatedByValue
	return func() error {
		o, err := e.get("HostEndpoint", "", name)
		if err != nil {
			return err
		}
		h := o.(*api.HostEndpoint)
		if h.Spec.Node != node || h.Spec.InterfaceName != iface || !slices.Equal(h.Spec.ExpectedIPs, ips) ||
			!maps.Equal(h.Labels, want) || !slices.Equal(h.Spec.Profiles, []string{"projectcalico-default-allow"}) {
			return fmt.Errorf("host endpoint %s: node %q interface %q expectedIPs %v labels %v profiles %v; want node %q interface %q expectedIPs %v labels %v",
				name, h.Spec.Node, h.Spec.InterfaceName, h.Spec.ExpectedIPs, h.Labels, h.Spec.Profiles, node, iface, ips, want)
		}
		return nil
	}
}

func manualHEP(name, node string) *api.HostEndpoint {
	h := &api.HostEndpoint{}
	h.Kind, h.APIVersion, h.Name = "HostEndpoint", api.GroupVersion, name
	h.Spec = api.HostEndpointSpec{Node: node, InterfaceName: "eth9"}
	return h
}

// TestKubeControllersConfiguration (etcd): the resource's settings take
// effect while the controllers run: automatic host endpoints made,
// updated, restored and removed; syncLabels; a reconcilerPeriod; etcd
// compaction; the controllers' log level; settings not honoured said so.
func TestKubeControllersConfiguration(t *testing.T) {
	e := newEnv(t)
	e.create(t,
		hepNode("hep-a", map[string]string{"rack": "r1"}, nil),
		manualHEP("hand-made", "hep-a"),
		calicoNode("sl", "k8s-sl", nil),
		kcc(func(s *api.KubeControllersConfigurationSpec) {
			s.Controllers.Node.SyncLabels = "Disabled"
			s.Controllers.Node.HostEndpoint.AutoCreate = "Enabled"
			s.Controllers.Node.HostEndpoint.Templates = []api.Template{
				{GenerateName: "uplink", InterfacePattern: "^eth1$", NodeSelector: "rack == 'r1'", Labels: map[string]string{"role": "uplink"}},
			}
			s.Controllers.Namespace.ReconcilerPeriod = dur(time.Second)
			s.EtcdV3CompactionPeriod = dur(time.Second)
			s.HealthChecks = "Disabled"
		}),
	)
	e.k8sNode(t, "k8s-sl", map[string]string{"zone": "z1"})
	e.kube.CreateNamespace(t, "rp", nil)
	e.start(t, e.fastConfig("kcc", Node, Namespace))
	allIPs := []string{"192.0.2.21", "2001:db8::21", "10.50.0.1", "10.60.0.1", "192.0.2.22", "203.0.113.9"}

	t.Run("automatic host endpoints", func(t *testing.T) {
		eventually(t, deadline, e.hepIs("hep-a-auto-hep", "hep-a", "*", allIPs, map[string]string{"rack": "r1"}))
		eventually(t, deadline, e.hepIs("hep-a-uplink-eth1-auto-hep", "hep-a", "eth1", []string{"203.0.113.9"},
			map[string]string{"rack": "r1", "role": "uplink"}))
		eventually(t, deadline, e.hepIs("sl-auto-hep", "sl", "*", nil, map[string]string{}))
	})

	t.Run("follow the node", func(t *testing.T) {
		o, err := e.get("Node", "", "hep-a")
		if err != nil {
			t.Fatal(err)
		}
		n := o.(*api.Node)
		n.Labels["rack"] = "r2"
		n.Spec.Addresses = n.Spec.Addresses[:1]
		n.Spec.Interfaces = n.Spec.Interfaces[:1]
		if _, err := e.store.Update(e.ctx, n); err != nil {
			t.Fatal(err)
		}
		eventually(t, deadline, e.hepIs("hep-a-auto-hep", "hep-a", "*", []string{"192.0.2.21", "2001:db8::21", "10.50.0.1", "10.60.0.1"},
			map[string]string{"rack": "r2"}))
		// The template's selector no longer matches.
		eventually(t, deadline, e.gone("HostEndpoint", "", "hep-a-uplink-eth1-auto-hep"))
	})

	t.Run("restore one changed by hand", func(t *testing.T) {
		o, err := e.get("HostEndpoint", "", "sl-auto-hep")
		if err != nil {
			t.Fatal(err)
		}
		h := o.(*api.HostEndpoint)
		h.Spec.ExpectedIPs = []string{"192.0.2.99"}
		if _, err := e.store.Update(e.ctx, h); err != nil {
			t.Fatal(err)
		}
		eventually(t, deadline, e.hepIs("sl-auto-hep", "sl", "*", nil, map[string]string{}))
	})

	t.Run("syncLabels", func(t *testing.T) {
		hasZone := func() error {
			o, err := e.get("Node", "", "sl")
			if err != nil {
				return err
			}
			if o.Meta().Labels["zone"] != "z1" {
				return fmt.Errorf("calico node sl labels %v", o.Meta().Labels)
			}
			return nil
		}
		never(t, 2*time.Second, "label sync while syncLabels is Disabled", hasZone)
		e.setKCC(t, func(s *api.KubeControllersConfigurationSpec) { s.Controllers.Node.SyncLabels = "Enabled" })
		eventually(t, deadline, hasZone)
		// The automatic host endpoint follows the synced labels.
		eventually(t, deadline, e.hepIs("sl-auto-hep", "sl", "*", nil, map[string]string{"zone": "z1"}))
	})

	t.Run("reconcilerPeriod", func(t *testing.T) {
		// A profile deleted behind the controller's back comes back at
		// the next full reconcile, a second later (not 5 minutes).
		eventually(t, deadline, e.exists("Profile", "", "kns.rp"))
		if _, err := e.store.Delete(e.ctx, "Profile", "", "kns.rp", ""); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, e.exists("Profile", "", "kns.rp"))
	})

	t.Run("etcdV3CompactionPeriod", func(t *testing.T) {
		c := e.store.(EtcdClienter).Etcd()
		first, err := c.Get(e.ctx, "compact_rev_key")
		if err != nil {
			t.Fatal(err)
		}
		old := first.Header.Revision
		// Write so that revisions move, and wait for a round to compact
		// past old.
		eventually(t, deadline, func() error {
			if _, err := c.Put(e.ctx, "/calico-test/compaction", time.Now().String()); err != nil {
				return err
			}
			_, err := c.Get(e.ctx, "/calico-test/compaction", clientv3.WithRev(old))
			if errors.Is(err, rpctypes.ErrCompacted) {
				return nil
			}
			return fmt.Errorf("revision %d still readable (err %v)", old, err)
		})
	})

	t.Run("logSeverityScreen", func(t *testing.T) {
		debug := func() error {
			if e.logged("level=DEBUG", "component=kube-controllers") {
				return nil
			}
			return errors.New("no debug line from the controllers")
		}
		if debug() == nil {
			t.Fatal("debug lines at logSeverityScreen Info")
		}
		e.setKCC(t, func(s *api.KubeControllersConfigurationSpec) { s.LogSeverityScreen = "Debug" })
		eventually(t, deadline, debug)
	})

	t.Run("settings not honoured are reported", func(t *testing.T) {
		if !e.logged("level=WARN", "not honoured", "healthChecks: Disabled") {
			t.Error("no warning that healthChecks is not honoured")
		}
	})

	t.Run("node deleted", func(t *testing.T) {
		if _, err := e.store.Delete(e.ctx, "Node", "", "hep-a", ""); err != nil {
			t.Fatal(err)
		}
		eventually(t, deadline, e.gone("HostEndpoint", "", "hep-a-auto-hep"))
	})

	t.Run("autoCreate Disabled", func(t *testing.T) {
		e.setKCC(t, func(s *api.KubeControllersConfigurationSpec) { s.Controllers.Node.HostEndpoint.AutoCreate = "Disabled" })
		eventually(t, deadline, e.gone("HostEndpoint", "", "sl-auto-hep"))
		// Never one the controllers did not make.
		if err := e.exists("HostEndpoint", "", "hand-made")(); err != nil {
			t.Error(err)
		}
	})
}

// TestAutoHostEndpointsKDD: on the Kubernetes datastore the automatic
// host endpoints follow the Kubernetes Nodes (the Calico Nodes there).
func TestAutoHostEndpointsKDD(t *testing.T) {
	e := newKDDEnv(t)
	k := e.kube.Client
	n, err := k.CoreV1().Nodes().Create(e.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: "kdd-hep", Labels: map[string]string{"rack": "r9"},
		Annotations: map[string]string{"projectcalico.org/IPv4Address": "192.0.2.41/24"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.42"}, {Type: corev1.NodeHostName, Address: "kdd-hep"}}
	if _, err := k.CoreV1().Nodes().UpdateStatus(e.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.create(t, kcc(func(s *api.KubeControllersConfigurationSpec) { s.Controllers.Node.HostEndpoint.AutoCreate = "Enabled" }))
	e.start(t, e.fastConfig("kdd-hep", Node))

	eventually(t, deadline, e.hepIs("kdd-hep-auto-hep", "kdd-hep", "*", []string{"192.0.2.41", "192.0.2.42"}, map[string]string{"rack": "r9"}))

	n, err = k.CoreV1().Nodes().Get(e.ctx, "kdd-hep", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels["rack"] = "r10"
	if _, err := k.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, deadline, e.hepIs("kdd-hep-auto-hep", "kdd-hep", "*", []string{"192.0.2.41", "192.0.2.42"}, map[string]string{"rack": "r10"}))

	if err := k.CoreV1().Nodes().Delete(e.ctx, "kdd-hep", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, deadline, e.gone("HostEndpoint", "", "kdd-hep-auto-hep"))
	if strings.Contains(e.logs.String(), "host endpoint sync failed") {
		t.Errorf("host endpoint syncs failed:\n%s", e.logs.String())
	}
}
