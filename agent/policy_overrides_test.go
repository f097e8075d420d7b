package agent

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// TestPolicyOverrides: FELIX_* settings outrank both FelixConfigurations
// in the datastore; fields they leave unset still come from there.
func TestPolicyOverrides(t *testing.T) {
	p := newTestPolicy()
	felix := func(name string, spec api.FelixConfigurationSpec) confwatch.Update {
		return setUpdate("FelixConfiguration", name, &api.FelixConfiguration{Spec: spec})
	}
	p.apply([]confwatch.Update{
		felix("default", api.FelixConfigurationSpec{DefaultEndpointToHostAction: "Drop", IptablesFilterDenyAction: "Reject"}),
		felix("node.n1", api.FelixConfigurationSpec{DefaultEndpointToHostAction: "Return"}),
	})
	if got := p.Snapshot().Config.EndpointToHostAction; got != "RETURN" {
		t.Fatalf("without overrides: endpoint-to-host = %q, want the node's RETURN", got)
	}
	off := false
	p.Overrides = &api.FelixConfigurationSpec{DefaultEndpointToHostAction: "Accept", IPv6Support: &off}
	cfg := p.Snapshot().Config
	if cfg.EndpointToHostAction != "ACCEPT" || cfg.IPv6 {
		t.Errorf("with overrides: endpoint-to-host %q, IPv6 %v; want ACCEPT, false", cfg.EndpointToHostAction, cfg.IPv6)
	}
	if cfg.DenyAction != "REJECT" {
		t.Errorf("deny action = %q, want the datastore's REJECT", cfg.DenyAction)
	}
}

// TestPolicyServiceCIDRs: the default BGPConfiguration's advertised
// service ranges reach the compiler (serviceLoopPrevention guards them);
// a node's own BGPConfiguration does not count, as in felix.
func TestPolicyServiceCIDRs(t *testing.T) {
	p := newTestPolicy()
	bgp := func(name string, spec api.BGPConfigurationSpec) confwatch.Update {
		return setUpdate("BGPConfiguration", name, &api.BGPConfiguration{Spec: spec})
	}
	p.apply([]confwatch.Update{
		bgp("default", api.BGPConfigurationSpec{
			ServiceClusterIPs:  []api.ServiceClusterIPBlock{{CIDR: "10.96.0.0/12"}},
			ServiceExternalIPs: []api.ServiceExternalIPBlock{{CIDR: "198.51.100.0/24"}},
		}),
		bgp("node.n1", api.BGPConfigurationSpec{ServiceClusterIPs: []api.ServiceClusterIPBlock{{CIDR: "10.200.0.0/16"}}}),
	})
	got := p.Snapshot().Config.ServiceCIDRs
	if want := []string{"10.96.0.0/12", "198.51.100.0/24"}; !slices.Equal(got, want) {
		t.Errorf("service CIDRs %q, want %q", got, want)
	}
	if !slices.Contains(PolicyKinds(), "BGPConfiguration") {
		t.Error("the policy actor does not watch BGPConfiguration")
	}
}

// newTestPolicy is a policy actor of node n1 with no kernel.
func newTestPolicy() *Policy {
	return NewPolicy(PolicyConfig{Node: "n1", Resync: time.Minute, Logger: slog.New(slog.DiscardHandler)}, nil, nil, nil)
}

// setUpdate is confwatch's update that sets o, a cluster-wide kind.
func setUpdate(kind, name string, o api.Object) confwatch.Update {
	o.Type().Kind, o.Meta().Name = kind, name
	return confwatch.Update{Type: confwatch.Set, Key: confwatch.Key{Kind: kind, Name: name}, Object: o}
}
