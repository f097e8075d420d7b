package xtables

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
)

// ruleLines are the "-A chain ..." lines of one table and chain of an
// iptables-save output, without their hash comments.
func ruleLines(save, table, chain string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(save, "\n") {
		if strings.HasPrefix(l, "*") {
			in = l == "*"+table
		}
		if in && strings.HasPrefix(l, "-A "+chain+" ") {
			out = append(out, commentRE.ReplaceAllString(l, ""))
		}
	}
	return out
}

var commentRE = regexp.MustCompile(`-m comment --comment "?cali:[^ ]*"? `)

// TestFelixConfigurationInKernel: the FelixConfiguration fields that shape
// the iptables rules, programmed into a throwaway namespace's kernel and
// read back with iptables-save as a user would look at them.
func TestFelixConfigurationInKernel(t *testing.T) {
	logRule := []api.Rule{{Action: api.Log}}
	audit := api.GlobalNetworkPolicy{}
	audit.Kind, audit.APIVersion, audit.Name = "GlobalNetworkPolicy", api.GroupVersion, "audit"
	audit.Spec = api.GlobalNetworkPolicySpec{Selector: "all()", Ingress: logRule}
	audit.Default()
	pr := &api.Port{MinPort: 40000, MaxPort: 40999}
	tests := []struct {
		name  string
		spec  api.FelixConfigurationSpec
		check func(t *testing.T, r *nsRunner, save string)
	}{
		{"natPortRange", api.FelixConfigurationSpec{NATPortRange: pr}, func(t *testing.T, r *nsRunner, save string) {
			got := ruleLines(save, "nat", "cali-nat-outgoing")
			if len(got) != 5 || !strings.Contains(got[0], "-p tcp") || !strings.Contains(got[0], "-j MASQUERADE --to-ports 40000-40999 --random-fully") ||
				!strings.Contains(got[2], "-p udp") || !strings.Contains(got[2], "--to-ports 40000-40999") ||
				strings.Contains(got[4], "--to-ports") || !strings.HasSuffix(got[4], "-j MASQUERADE --random-fully") {
				t.Errorf("cali-nat-outgoing:\n%s", strings.Join(got, "\n"))
			}
		}},
		{"natOutgoingAddress with natPortRange", api.FelixConfigurationSpec{NATPortRange: pr, NATOutgoingAddress: "192.0.2.7"}, func(t *testing.T, r *nsRunner, save string) {
			got := ruleLines(save, "nat", "cali-nat-outgoing")
			if len(got) != 5 || !strings.Contains(got[0], "-j SNAT --to-source 192.0.2.7:40000-40999") || !strings.Contains(got[4], "-j SNAT --to-source 192.0.2.7") {
				t.Errorf("cali-nat-outgoing:\n%s", strings.Join(got, "\n"))
			}
		}},
		{"iptablesNATOutgoingInterfaceFilter", api.FelixConfigurationSpec{IptablesNATOutgoingInterfaceFilter: "eth+"}, func(t *testing.T, r *nsRunner, save string) {
			if got := ruleLines(save, "nat", "cali-nat-outgoing"); len(got) != 1 || !strings.Contains(got[0], "-o eth+") {
				t.Errorf("cali-nat-outgoing:\n%s", strings.Join(got, "\n"))
			}
		}},
		{"chainInsertMode Insert", api.FelixConfigurationSpec{}, func(t *testing.T, r *nsRunner, save string) {
			got := ruleLines(save, "filter", "FORWARD")
			if len(got) != 2 || !strings.Contains(got[0], "-j cali-FORWARD") || !strings.Contains(got[1], "198.51.100.1") {
				t.Errorf("FORWARD:\n%s", strings.Join(got, "\n"))
			}
		}},
		{"chainInsertMode Append", api.FelixConfigurationSpec{ChainInsertMode: "Append"}, func(t *testing.T, r *nsRunner, save string) {
			for _, chain := range []string{"FORWARD", "INPUT", "OUTPUT"} {
				got := ruleLines(save, "filter", chain)
				if len(got) != 2 || !strings.Contains(got[0], "198.51.100.1") || !strings.Contains(got[1], "-j cali-"+chain) {
					t.Errorf("%s:\n%s", chain, strings.Join(got, "\n"))
				}
			}
		}},
		{"logPrefix", api.FelixConfigurationSpec{LogPrefix: "%k-%n"}, func(t *testing.T, r *nsRunner, save string) {
			if !strings.Contains(save, `-j LOG --log-prefix "gnp-audit: " --log-level 5`) {
				t.Errorf("no LOG rule with the expanded prefix:\n%s", grep(save, "LOG"))
			}
		}},
		{"defaultEndpointToHostAction Accept", api.FelixConfigurationSpec{DefaultEndpointToHostAction: "Accept"}, func(t *testing.T, r *nsRunner, save string) {
			if got := ruleLines(save, "filter", "cali-wl-to-host"); len(got) == 0 || got[len(got)-1] != `-A cali-wl-to-host -m comment --comment "Configured DefaultEndpointToHostAction" -j ACCEPT` {
				t.Errorf("cali-wl-to-host:\n%s", strings.Join(got, "\n"))
			}
		}},
		{"defaultEndpointToHostAction Return", api.FelixConfigurationSpec{DefaultEndpointToHostAction: "Return"}, func(t *testing.T, r *nsRunner, save string) {
			if got := ruleLines(save, "filter", "cali-wl-to-host"); len(got) == 0 || got[len(got)-1] != `-A cali-wl-to-host -m comment --comment "Configured DefaultEndpointToHostAction" -j RETURN` {
				t.Errorf("cali-wl-to-host:\n%s", strings.Join(got, "\n"))
			}
		}},
		{"defaultEndpointToHostAction default", api.FelixConfigurationSpec{}, func(t *testing.T, r *nsRunner, save string) {
			if got := ruleLines(save, "filter", "cali-wl-to-host"); len(got) == 0 || got[len(got)-1] != `-A cali-wl-to-host -m comment --comment "Configured DefaultEndpointToHostAction" -j DROP` {
				t.Errorf("cali-wl-to-host:\n%s", strings.Join(got, "\n"))
			}
		}},
		{"iptablesMarkMask", api.FelixConfigurationSpec{IptablesMarkMask: ptr(uint32(0xff00))}, func(t *testing.T, r *nsRunner, save string) {
			// The accept bit is the mask's lowest: 0x100, where the
			// default mask gives 0x10000.
			fwd := strings.Join(ruleLines(save, "filter", "cali-FORWARD"), "\n")
			if !strings.Contains(fwd, "-m mark --mark 0x100/0x100 -j ACCEPT") || strings.Contains(save, "0x10000") {
				t.Errorf("cali-FORWARD with mark mask 0xff00:\n%s", fwd)
			}
		}},
		{"maxIpsetSize", api.FelixConfigurationSpec{MaxIpsetSize: ptr(4096)}, func(t *testing.T, r *nsRunner, save string) {
			sets := r.sh(t, "ipset", "save")
			if !strings.Contains(sets, "maxelem 4096") || strings.Contains(sets, "maxelem 1048576") {
				t.Errorf("ip sets:\n%s", grep(sets, "create"))
			}
		}},
	}
	mode := "nft"
	if _, err := os.Stat("/usr/sbin/iptables-nft-restore"); err != nil {
		mode = "legacy"
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newNS(t)
			b := BackendFor(mode, 4)
			ipt := "iptables-" + mode
			// Another program's rules, there before ours.
			for _, chain := range []string{"FORWARD", "INPUT", "OUTPUT"} {
				r.sh(t, ipt, "-A", chain, "-s", "198.51.100.1", "-j", "ACCEPT")
			}
			s := snapshot(false)
			s.GlobalNetworkPolicies = []api.GlobalNetworkPolicy{audit}
			prof := api.Profile{}
			prof.Kind, prof.APIVersion, prof.Name = "Profile", api.GroupVersion, "kns.default"
			s.Profiles = []api.Profile{prof}
			s.Config = policy.ConfigFromFelix(&tc.spec)
			s.Config.NATRandomFully = true
			p := New(b, r, nil, quiet())
			if tc.spec.MaxIpsetSize != nil {
				p.SetMaxIPSetSize(*tc.spec.MaxIpsetSize)
			}
			res := policy.Compile(s)
			if len(res.Problems) > 0 {
				t.Fatalf("problems: %v", res.Problems)
			}
			if _, err := p.Apply(context.Background(), res.V4); err != nil {
				t.Fatal(err)
			}
			tc.check(t, r, r.sh(t, b.Save))
		})
	}
}

func ptr[T any](v T) *T { return &v }

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// failingRunner is a kernel that has nothing of ours and, while fail is
// set, refuses every iptables-restore.
type failingRunner struct{ fail bool }

func (f *failingRunner) Run(_ context.Context, name string, args []string, stdin string) (string, error) {
	if f.fail && strings.Contains(name, "restore") && name != "ipset" {
		return "", errors.New("iptables-restore: line 3 failed")
	}
	return "", nil
}

// TestFelixIptablesMetrics: Felix's iptables and ipset metrics follow
// what the programmer does: a failed iptables-restore counts as a call
// and an error, a good one as a call, and the chain, rule and IP set
// gauges show what is programmed.
func TestFelixIptablesMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	r := &failingRunner{fail: true}
	p := New(BackendFor("nft", 4), r, m, quiet())
	s := snapshot(false)
	prof := api.Profile{}
	prof.Kind, prof.APIVersion, prof.Name = "Profile", api.GroupVersion, "kns.default"
	s.Profiles = []api.Profile{prof}
	f := policy.Compile(s).V4
	ctx := context.Background()

	if _, err := p.Apply(ctx, f); err == nil {
		t.Fatal("apply succeeded with a failing iptables-restore")
	}
	val := func(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }
	if calls, errs := val(m.FelixRestores), val(m.FelixRestoreErrors); calls != 1 || errs != 1 {
		t.Errorf("after a failed restore: felix_iptables_restore_calls %v, felix_iptables_restore_errors %v; want 1, 1", calls, errs)
	}
	r.fail = false
	if _, err := p.Apply(ctx, f); err != nil {
		t.Fatal(err)
	}
	if calls, errs := val(m.FelixRestores), val(m.FelixRestoreErrors); calls != 2 || errs != 1 {
		t.Errorf("after a good restore: felix_iptables_restore_calls %v, felix_iptables_restore_errors %v; want 2, 1", calls, errs)
	}
	if got, want := val(m.FelixChains.WithLabelValues("4", "filter")), float64(len(f.Filter.Chains)); got != want {
		t.Errorf("felix_iptables_chains{ip_version=4,table=filter} = %v, want %v", got, want)
	}
	if got := val(m.FelixRules.WithLabelValues("4", "filter")); got < float64(len(f.Filter.Chains)) {
		t.Errorf("felix_iptables_rules{ip_version=4,table=filter} = %v", got)
	}
	if got := val(m.FelixLinesExecuted.WithLabelValues("4", "filter")); got == 0 {
		t.Error("felix_iptables_lines_executed{ip_version=4,table=filter} is 0 after writing the table")
	}
	if got, want := val(m.FelixIPSets.WithLabelValues("inet")), float64(len(f.IPSets)); got != want || want == 0 {
		t.Errorf("felix_ipsets_calico{ip_version=inet} = %v, want %v", got, want)
	}
	if got := val(m.FelixSaves); got != 2 {
		t.Errorf("felix_iptables_save_calls = %v, want 2 (every table in one save, read twice)", got)
	}
	if got := val(m.FelixIPSetCalls); got < 3 {
		t.Errorf("felix_ipset_calls = %v, want the saves and the restore", got)
	}
}
