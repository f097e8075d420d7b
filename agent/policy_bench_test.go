package agent

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/agent/xtables"
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
)

// memTables is an iptables that keeps what iptables-restore writes and
// shows it to iptables-save, at no cost beyond parsing: the benchmark
// measures the agent's CPU, not the kernel's. ipset takes every write
// and saves nothing (after its first read the programmer trusts its
// own record of the sets).
type memTables struct {
	chains   map[string]map[string][]string // table, chain: rules
	order    map[string][]string
	restores int
}

func newMemTables() *memTables {
	return &memTables{chains: map[string]map[string][]string{}, order: map[string][]string{}}
}

func (m *memTables) Run(_ context.Context, name string, _ []string, stdin string) (string, error) {
	switch {
	case strings.HasSuffix(name, "-restore"):
		m.restores++
		m.restore(stdin)
	case strings.HasSuffix(name, "-save"):
		var b strings.Builder
		for _, t := range slices.Sorted(maps.Keys(m.chains)) {
			b.WriteString("*" + t + "\n")
			for _, c := range m.order[t] {
				b.WriteString(":" + c + " - [0:0]\n")
			}
			for _, c := range m.order[t] {
				for _, r := range m.chains[t][c] {
					b.WriteString("-A " + c + " " + r + "\n")
				}
			}
			b.WriteString("COMMIT\n")
		}
		return b.String(), nil
	}
	return "", nil
}

func (m *memTables) restore(payload string) {
	table := ""
	for line := range strings.Lines(payload) {
		line = strings.TrimSuffix(line, "\n")
		op, rest, _ := strings.Cut(line, " ")
		chain, rule, _ := strings.Cut(rest, " ")
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
			if m.chains[table] == nil {
				m.chains[table] = map[string][]string{}
			}
		case strings.HasPrefix(line, ":"):
			if _, ok := m.chains[table][op[1:]]; !ok {
				m.order[table] = append(m.order[table], op[1:])
			}
			m.chains[table][op[1:]] = nil
		case op == "-A":
			m.touch(table, chain)
			m.chains[table][chain] = append(m.chains[table][chain], rule)
		case op == "-I":
			m.touch(table, chain)
			rule = strings.TrimPrefix(rule, "1 ")
			m.chains[table][chain] = append([]string{rule}, m.chains[table][chain]...)
		case op == "-D":
			if i := slices.Index(m.chains[table][chain], rule); i >= 0 {
				m.chains[table][chain] = slices.Delete(m.chains[table][chain], i, i+1)
			}
		case op == "-X":
			delete(m.chains[table], chain)
			m.order[table] = slices.DeleteFunc(m.order[table], func(c string) bool { return c == chain })
		}
	}
}

func (m *memTables) touch(table, chain string) {
	if _, ok := m.chains[table][chain]; !ok {
		m.chains[table][chain] = nil
		m.order[table] = append(m.order[table], chain)
	}
}

// BenchmarkPolicyChange is one policy change of make bench-dataplane's
// mix (a rule's port, a policy's selector, a pod's label, a new policy,
// that policy deleted) at its scale (1,000 local endpoints, 500
// policies), through the policy actor's program: snapshot, incremental
// compile and the iptables programmer, with a kernel that takes every
// write at no cost. It is the agent's own CPU and garbage per change.
func BenchmarkPolicyChange(b *testing.B) {
	const node = "node1"
	objs := storetest.DataplaneCluster(b, node, 1000, 500)
	kernel := newMemTables()
	p := NewPolicy(PolicyConfig{Node: node, Resync: 1 << 62, Logger: quiet()}, nil, &programmer{xtables.New(xtables.BackendFor("nft", 4), kernel, nil, quiet())}, nil)
	p.Overrides = &api.FelixConfigurationSpec{IPv6Support: new(bool)}
	var ups []confwatch.Update
	var np *api.NetworkPolicy
	var wep *api.WorkloadEndpoint
	for _, o := range objs {
		ups = append(ups, confwatch.Update{Type: confwatch.Set, Key: confwatch.KeyOf(o), Object: o})
		if n, ok := o.(*api.NetworkPolicy); ok && np == nil {
			np = n
		}
		if w, ok := o.(*api.WorkloadEndpoint); ok && wep == nil {
			wep = w
		}
	}
	p.apply(ups)
	ctx := context.Background()
	// Twice: the first writes into empty built-in chains, the second
	// finds the hooks in place and leaves the programmer trusting its
	// record, as in the agent.
	for range 3 {
		if err := p.program(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if kernel.restores > 2 {
		b.Fatalf("%d restores for an unchanged snapshot: the in-memory iptables does not show what was written", kernel.restores)
	}
	// The changed objects are new ones, as confwatch decodes them.
	variant := func(edit func(o api.Object) bool) api.Object {
		for _, o := range storetest.DataplaneCluster(b, node, 1000, 500) {
			if edit(o) {
				return o
			}
		}
		b.Fatal("no object to change")
		return nil
	}
	isFirst := func(o api.Object, first api.Object) bool {
		return o.Type().Kind == first.Type().Kind && o.Meta().Namespace == first.Meta().Namespace && o.Meta().Name == first.Meta().Name
	}
	port := variant(func(o api.Object) bool {
		if !isFirst(o, np) {
			return false
		}
		o.(*api.NetworkPolicy).Spec.Ingress[0].Destination.Ports = []api.Port{api.SinglePort(20000)}
		return true
	})
	sel := variant(func(o api.Object) bool {
		if !isFirst(o, np) {
			return false
		}
		o.(*api.NetworkPolicy).Spec.Selector = "(" + np.Spec.Selector + ") || app == 'app10'"
		return true
	})
	labels := [2]api.Object{wep, variant(func(o api.Object) bool {
		if !isFirst(o, wep) {
			return false
		}
		o.(*api.WorkloadEndpoint).Labels["app"] = "app99"
		return true
	})}
	added := &api.NetworkPolicy{TypeMeta: np.TypeMeta, ObjectMeta: api.ObjectMeta{Name: "bench-new", Namespace: np.Namespace},
		Spec: api.NetworkPolicySpec{Order: new(0.5), Selector: np.Spec.Selector,
			Ingress: []api.Rule{{Action: api.Allow, Protocol: new(api.ProtocolFromString("TCP")),
				Destination: api.EntityRule{Ports: []api.Port{api.SinglePort(30000)}}}}}}
	i := 0
	for b.Loop() {
		var u confwatch.Update
		switch i % 5 {
		case 0:
			u = confwatch.Update{Type: confwatch.Set, Key: confwatch.KeyOf(port), Object: port}
		case 1:
			u = confwatch.Update{Type: confwatch.Set, Key: confwatch.KeyOf(sel), Object: sel}
		case 2:
			w := labels[(i/5+1)%2]
			u = confwatch.Update{Type: confwatch.Set, Key: confwatch.KeyOf(w), Object: w}
		case 3:
			u = confwatch.Update{Type: confwatch.Set, Key: confwatch.KeyOf(added), Object: added}
		case 4:
			u = confwatch.Update{Type: confwatch.Delete, Key: confwatch.KeyOf(added)}
		}
		i++
		p.apply([]confwatch.Update{u})
		if err := p.program(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
