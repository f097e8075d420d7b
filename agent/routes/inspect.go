package routes

// Want is one source's route to a destination.
type Want struct {
	Source string `json:"source"`
	Route  Route  `json:"-"`
	// Text is Route.String(), for reports.
	Text string `json:"route"`
}

// Inspection is what the route table knows about one destination: who
// wants a route to it, which of them it programs, and whether its last
// pass got that route into the kernel. It answers `calicoctl node bgp
// why` from the table's own state, not from a second computation.
type Inspection struct {
	// Wanted are the sources wanting a route to the destination, in
	// priority order (the first is the one the table programs), in every
	// routing table.
	Wanted []Want `json:"wanted,omitempty"`
	// Applied is the route the table's last pass left in the kernel for
	// the destination (main table first); nil when it left none.
	Applied *Want `json:"applied,omitempty"`
	// Problem is why the last pass could not write the wanted route: a
	// missing device, the kernel's refusal ("network is unreachable").
	Problem string `json:"problem,omitempty"`
	// Passes counts the table's reconcile passes so far; 0 means it has
	// not written anything yet (it waits for every expected source).
	Passes int `json:"passes"`
}
