package routetable

import (
	"net/netip"

	"github.com/projectcalico/calico-node/agent/routes"
)

// record keeps what a pass left in the kernel (want without the routes
// it failed to write) and why it failed, for Inspect. want is not
// modified afterwards: it becomes t.last or is dropped.
func (t *Table) record(want map[routeKey]routes.Route, problems map[routeKey]string) {
	shown := make(map[routeKey]routes.Route, len(want))
	for k, r := range want {
		if _, failed := problems[k]; !failed {
			shown[k] = r
		}
	}
	t.mu.Lock()
	t.shown, t.problems = shown, problems
	t.passes++
	t.mu.Unlock()
}

// Inspect reports the table's view of dst: the sources that want a route
// to it, in the order that decides between them (the same order the
// reconcile uses), what the last pass left in the kernel and what went
// wrong with it. It reads only the table's state, never the kernel.
func (t *Table) Inspect(dst netip.Prefix) routes.Inspection {
	dst = dst.Masked()
	t.mu.Lock()
	defer t.mu.Unlock()
	in := routes.Inspection{Passes: t.passes}
	var keys []routeKey
	seen := map[routeKey]bool{}
	for _, n := range t.sourceOrder() {
		for _, r := range t.sources[n] {
			if r.Dst.Masked() != dst {
				continue
			}
			in.Wanted = append(in.Wanted, routes.Want{Source: n, Route: r, Text: r.String()})
			if k := key(r); !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	// The main table's route first: that is the one BGP and the workloads
	// program.
	mainKey := key(routes.Route{Dst: dst})
	others := keys
	keys = []routeKey{mainKey}
	for _, k := range others {
		if k != mainKey {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		if r, ok := t.shown[k]; ok && in.Applied == nil {
			in.Applied = &routes.Want{Route: r, Text: r.String()}
			for _, w := range in.Wanted {
				if key(w.Route) == k {
					in.Applied.Source = w.Source
					break
				}
			}
		}
		if p, ok := t.problems[k]; ok && in.Problem == "" {
			in.Problem = p
		}
	}
	return in
}
