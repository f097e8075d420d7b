package routetable

import (
	"errors"

	"github.com/projectcalico/calico-node/agent/routes"
)

// Update changes some of the routes source wants: set adds or replaces
// routes (by table and destination), del withdraws the routes to del's
// tables and destinations (only their Table and Dst count). A source
// that learns its routes one change at a time (BGP) calls Update with
// what changed, and the next pass looks only at those destinations
// instead of merging and comparing every route of every source. The
// first Update of a source counts as its first set for Expect.
func (t *Table) Update(source string, set, del []routes.Route) {
	t.mu.Lock()
	m := t.sources[source]
	if m == nil {
		m = map[routeKey]routes.Route{}
		t.sources[source] = m
	}
	if t.touched == nil {
		t.touched = map[routeKey]bool{}
	}
	for _, r := range del {
		k := key(r)
		delete(m, k)
		t.touched[k] = true
	}
	for _, r := range set {
		k := key(r)
		m[k] = r
		t.touched[k] = true
	}
	t.mu.Unlock()
	t.kick()
}

// takeTouched returns and forgets the keys Updates changed, or all when a
// Set happened since the last pass.
func (t *Table) takeTouched() (keys map[routeKey]bool, all bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	keys, all = t.touched, t.all
	t.touched, t.all = nil, false
	return keys, all
}

// winner is the route the sources want for k: the first source's in
// sourceOrder (caller holds mu).
func (t *Table) winner(order []string, k routeKey) (routes.Route, bool) {
	for _, n := range order {
		if r, ok := t.sources[n][k]; ok {
			return r, true
		}
	}
	return routes.Route{}, false
}

// applyDelta is applyDiff for the keys Updates touched, plus those the
// last pass could not write (a missing device): it writes what changed
// for them against t.last and updates t.last, and what Inspect shows, in
// place. It costs in proportion to the change, not to the table.
func (t *Table) applyDelta(touched map[routeKey]bool) error {
	// Slices rather than maps where a key is only visited: in a burst
	// every map operation here is one per route.
	type wanted struct {
		k  routeKey
		w  routes.Route
		ok bool // some source wants k
	}
	t.mu.Lock()
	order := t.sourceOrder()
	keys := make([]wanted, 0, len(touched)+len(t.problems))
	add := func(k routeKey) {
		w, ok := t.winner(order, k)
		keys = append(keys, wanted{k, w, ok})
	}
	for k := range touched {
		add(k)
	}
	for k := range t.problems {
		if !touched[k] {
			add(k)
		}
	}
	t.mu.Unlock()

	t.skipped = 0
	problems := map[routeKey]string{} // every earlier problem's key is looked at again
	var ops []Op
	var opKeys []routeKey
	var written []wanted // to set in last once written
	var gone []routeKey  // to drop from last
	for _, kw := range keys {
		k, w := kw.k, kw.w
		prev, had := t.last[k]
		if !kw.ok {
			if had {
				gone = append(gone, k)
				if nr, err := t.toNetlink(prev); err == nil { // else its device is gone, and the route with it
					ops, opKeys = append(ops, Op{Del: true, Route: nr}), append(opKeys, k)
				}
			}
			continue
		}
		if had && prev == w {
			written = append(written, kw) // in place already; maybe after a problem
			continue
		}
		nr, err := t.toNetlink(w)
		if err != nil {
			t.log.Debug("skip route", "dst", w.Dst, "err", err)
			// Not written: retried (Run's pending backoff). The kernel
			// keeps what was there, and so does last, so that a
			// withdrawal still deletes it.
			t.skipped++
			problems[k] = "not written: " + err.Error()
			continue
		}
		ops, opKeys = append(ops, Op{Route: nr}), append(opKeys, k)
		written = append(written, kw)
	}
	// A refused route fails the pass: written is then not recorded, and
	// its problem keeps it out of shown.
	errs := t.writeReporting(ops, opKeys, problems)
	t.mu.Lock()
	for _, k := range gone {
		delete(t.shown, k)
	}
	for _, kw := range written {
		t.shown[kw.k] = kw.w
	}
	// shown holds what is in the kernel as wanted: not a route kept
	// while its replacement waits for a device.
	for k := range problems {
		delete(t.shown, k)
	}
	t.problems = problems
	t.passes++
	t.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		t.relist = true // the next pass lists the kernel again
		return err
	}
	report := t.onApplied != nil
	for _, k := range gone {
		if prev, ok := t.last[k]; ok {
			t.m.change(&prev, nil)
			delete(t.last, k)
			if report {
				t.appliedDel = append(t.appliedDel, prev)
			}
		}
	}
	for _, kw := range written {
		k, w := kw.k, kw.w
		prev, had := t.last[k]
		if had && prev == w {
			continue
		}
		if had {
			t.m.change(&prev, &w)
		} else {
			t.m.change(nil, &w)
		}
		t.last[k] = w
		if report {
			t.appliedSet = append(t.appliedSet, w)
		}
	}
	t.m.flush()
	t.signalApplied()
	return nil
}
