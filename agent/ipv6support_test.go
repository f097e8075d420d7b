package agent

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/agent/xtables"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
)

// nsExec runs commands inside a test namespace, as the agent runs inside
// the node's.
type nsExec struct{ ns string }

func (r nsExec) Run(ctx context.Context, name string, args []string, stdin string) (string, error) {
	return xtables.ExecRunner{}.Run(ctx, "ip", append([]string{"netns", "exec", r.ns, name}, args...), stdin)
}

// TestIPv6SupportFalse: with ipv6Support false the policy actor programs
// iptables but leaves ip6tables alone (the IPv4 rules still come); with
// it unset both families are programmed.
func TestIPv6SupportFalse(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	mode := "nft"
	if _, err := os.Stat("/usr/sbin/ip6tables-nft-restore"); err != nil {
		mode = "legacy"
	}
	for _, tc := range []struct {
		name  string
		ipv6  *bool
		want6 bool
	}{
		{"unset", nil, true},
		{"false", new(bool), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := netnstest.New(t, "agent-ipv6")
			r := nsExec{ns.Name}
			ctx, cancel, src, w := runWatcher()
			defer cancel()
			fc := felixConfig("node.n1", api.FelixConfigurationSpec{IPv6Support: tc.ipv6})
			fc.ResourceVersion = "6"
			src.events <- datastore.Event{Type: datastore.Added, Object: fc, Revision: 6}
			v4 := &programmer{xtables.New(xtables.BackendFor(mode, 4), r, nil, quiet())}
			v6 := &programmer{xtables.New(xtables.BackendFor(mode, 6), r, nil, quiet())}
			p := NewPolicy(PolicyConfig{Node: "n1", Resync: time.Hour, Logger: quiet()}, w, v4, v6)
			go p.Run(ctx)

			eventually(t, "IPv4 rules", func() bool {
				return strings.Contains(ns.MustRun(t, "iptables-"+mode+"-save"), ":cali-FORWARD")
			})
			has6 := func() bool { return strings.Contains(ns.MustRun(t, "ip6tables-"+mode+"-save"), "cali-") }
			if tc.want6 {
				eventually(t, "IPv6 rules", has6)
				return
			}
			// The FelixConfiguration came with the snapshot, so no apply
			// ever had IPv6 on; give a wrong one time to show.
			for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				if has6() {
					t.Fatal("ip6tables programmed with ipv6Support false")
				}
			}
		})
	}
}

// programmer is the xtables programmer as the Applier the actor wants.
type programmer struct{ *xtables.Programmer }

func (p *programmer) Apply(ctx context.Context, f *policy.Family) error {
	_, err := p.Programmer.Apply(ctx, f)
	return err
}
