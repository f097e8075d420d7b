package ctl

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/projectcalico/calico-node/agent"
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy/explain"
)

// dryRunApply is `apply --dry-run`: it validates the documents as apply
// does, then compiles every node's policy as it is and as it would be
// with them applied, and lists the packets whose verdict differs. It
// writes nothing.
func (s *session) dryRunApply() error {
	docs, err := readInputs(s.c.StringSlice("filename"), s.stdin)
	if err != nil {
		return err
	}
	objs, err := prepare(docs, s.c.String("namespace"), true)
	if err != nil {
		return err
	}
	before, err := s.loadCluster()
	if err != nil {
		return err
	}
	after := &cluster{objs: maps.Clone(before.objs), env: before.env}
	var ignored []string
	for _, obj := range objs {
		m := obj.Meta()
		if err := readOnly("apply", obj.Type().Kind, m.Namespace, m.Name); err != nil {
			return err
		}
		info, _ := api.LookupKind(obj.Type().Kind)
		stored, err := datastore.Prepare("apply", info, obj)
		if err != nil {
			return err
		}
		if tier := policyTier(stored); tier != "" {
			// The name the store shows for it, which is how the
			// compiler (and the existing policy) knows it.
			_, user := datastore.PolicyNames(stored.Meta().Name, tier)
			stored.Meta().Name = user
		}
		key := confwatch.KeyOf(stored)
		if !slices.Contains(agent.PolicyKinds(), key.Kind) {
			ignored = append(ignored, key.String())
			continue
		}
		after.objs[key] = stored
	}
	rep, err := explain.Impact(before.snapshots, after.snapshots, "")
	if err != nil {
		return err
	}
	fmt.Fprintf(s.out, "Dry run: nothing was written. Applying %d resource(s) would change the verdict on %d packet(s)", len(objs), len(rep.Changes))
	fmt.Fprintf(s.out, " (compared %d endpoints with %d peers on %d protocol/port combinations).\n", rep.Endpoints, rep.Peers, rep.Ports)
	for _, c := range rep.Changes {
		port := ""
		if c.Port != 0 {
			port = fmt.Sprintf("/%d", c.Port)
		}
		fmt.Fprintf(s.out, "  %s -> %s %s%s: %s -> %s (%s)\n", endName(c.From), endName(c.To), c.Protocol, port,
			c.Before, c.After, strings.Join(c.Because, "; "))
	}
	for _, k := range ignored {
		fmt.Fprintf(s.out, "  %s does not affect policy\n", k)
	}
	return nil
}

// endName is an end as the dry run lists it.
func endName(e explain.End) string {
	if e.Kind == explain.KindAddress {
		return e.Name
	}
	return e.Name + " (" + e.Address + ")"
}

func policyTier(o api.Object) string {
	switch p := o.(type) {
	case *api.NetworkPolicy:
		return p.Spec.TierName()
	case *api.GlobalNetworkPolicy:
		return p.Spec.TierName()
	}
	return ""
}
