package bgp

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	api "github.com/osrg/gobgp/v3/api"

	"github.com/projectcalico/calico-node/agent/routes"
)

// `calicoctl node routes` and `calicoctl node bgp why` (this file: the
// pure part). Every answer comes from what programs the speaker and the
// kernel: gobgp's own RIBs (global, and per peer adj-in and adj-out with
// gobgp's filtered flags), the policy statements the speaker hands gobgp
// (policyDefs, read by evalPolicy to name the deciding rule), the
// functions that decide what is originated (adverts), what goes to the
// kernel (importer.route, blackholes) and the route table's own record of
// what it wrote (routes.Inspection), and the kernel's routes. Nothing here
// recomputes a decision another way.

// pathFact is one path as gobgp lists it.
type pathFact struct {
	Prefix  netip.Prefix
	NextHop netip.Addr
	// Peer is the peer it came from; invalid for a path this node
	// originates.
	Peer     netip.Addr
	Received time.Time
	Best     bool
	Stale    bool
	// Filtered: in an adj-in listing, rejected by the import policy; in
	// an adj-out listing, by the export policy.
	Filtered bool
	ASPath   []uint32
}

func (p pathFact) local() bool { return !p.Peer.IsValid() }

// peerFact is one configured session as gobgp reports it.
type peerFact struct {
	Session         Session
	State           string // BIRD's word (StateEstablished, ...)
	Downtime        time.Time
	PeerRestarting  bool
	LocalRestarting bool
	PeerRestartTime time.Duration
	// EoRReceived, EoRSent: End-of-RIB for the prefix's family.
	EoRReceived, EoRSent bool
}

func (p peerFact) label() string {
	return fmt.Sprintf("%s (%s, %s)", p.Session.Addr, p.Session.Name, p.State)
}

// explainView is what the actor last computed and published, kept for
// the explanations (written by Run, read by the status socket).
type explainView struct {
	Enabled  bool
	In       RoutingInput
	Adverts  []Advert
	Filter   ExportFilter
	Sessions []Session
	// Published is the route set last handed to the route table; nil
	// before the first.
	Published []routes.Route
}

// kernelRoute is one route of the kernel's, to the prefix in question.
type kernelRoute struct {
	Dst     netip.Prefix
	Type    routes.Type
	Gw      netip.Addr
	Dev     string
	Proto   int
	Table   int
	Onlink  bool
	Unicast bool
}

func (k kernelRoute) String() string {
	s := k.Dst.String()
	switch k.Type {
	case routes.Blackhole:
		s += " blackhole"
	case routes.Unreachable:
		s += " unreachable"
	}
	if k.Gw.IsValid() {
		s += " via " + k.Gw.String()
	}
	if k.Dev != "" {
		s += " dev " + k.Dev
	}
	if k.Onlink {
		s += " onlink"
	}
	s += " proto " + protoName(k.Proto)
	return s + " table " + tableName(k.Table)
}

func protoName(p int) string {
	switch p {
	case 80:
		return "80 (calico)"
	case 12:
		return "bird"
	case 2:
		return "kernel"
	case 3:
		return "boot"
	case 4:
		return "static"
	}
	return strconv.Itoa(p)
}

func tableName(t int) string {
	switch t {
	case 0, 254:
		return "main"
	case 255:
		return "local"
	}
	return strconv.Itoa(t)
}

// withdrawal is a prefix this node lost every path to, or stopped
// originating.
type withdrawal struct {
	At      time.Time
	Peer    netip.Addr // the last best path's peer; invalid when it was this node's
	NextHop netip.Addr
	Why     string // "": the last path, from Peer via NextHop, was withdrawn
}

// reason is why the prefix has no path.
func (w *withdrawal) reason() string {
	if w.Why == "" && w.Peer.IsValid() {
		return "the last path, from " + w.Peer.String() + " via " + w.NextHop.String() + ", was withdrawn"
	}
	return w.Why
}

// whyFacts is everything `bgp why` reads, gathered at one moment.
type whyFacts struct {
	Node   string
	Prefix netip.Prefix
	Now    time.Time
	View   explainView
	Peers  []peerFact
	// Global is the global RIB's paths to the prefix (best first).
	Global []pathFact
	// AdjIn and AdjOut, by peer: what the peer sent (with import
	// verdicts) and what gobgp offers it (with export verdicts).
	AdjIn, AdjOut map[netip.Addr][]pathFact
	// Table is the route table's view; nil when the agent runs none.
	Table *routes.Inspection
	// Kernel is the kernel's routes to the prefix, every table and
	// protocol; KernelErr why they could not be read.
	Kernel    []kernelRoute
	KernelErr string
	// Reach says how the kernel reaches a next hop ("" and an error text
	// when it does not).
	Reach     map[netip.Addr]reach
	Withdrawn *withdrawal
}

type reach struct {
	Via string // the kernel's route to the next hop
	Err string // why there is none
}

// WhyReport answers `calicoctl node bgp why PREFIX`.
type WhyReport struct {
	Node   string `json:"node"`
	Prefix string `json:"prefix"`
	// Origin says whether, and by which rule, this node originates the
	// prefix.
	Origin string    `json:"origin"`
	Peers  []WhyPeer `json:"peers"`
	Kernel WhyKernel `json:"kernel"`
	// Withdrawn tells of the last path lost, when none is left.
	Withdrawn string `json:"withdrawn,omitempty"`
}

// WhyPeer is the prefix's fate with one peer, both ways.
type WhyPeer struct {
	Peer  string   `json:"peer"`
	Name  string   `json:"name"`
	Type  PeerType `json:"peerType"`
	State string   `json:"bgpState"`
	// Received is what the peer sent: accepted (best or not), rejected on
	// import (by which rule), held stale by graceful restart, nothing.
	Received string `json:"received"`
	// Sent is what this node sends it: Result is one of SentExported,
	// SentFiltered, SentNotSent, SentWithdrawn, SentWaitingEoR; Detail
	// the rule or the reason.
	Sent   string `json:"sent"`
	Detail string `json:"detail"`
}

// WhyPeer.Sent values.
const (
	SentExported   = "exported"
	SentFiltered   = "filtered"
	SentNotSent    = "not sent"
	SentWithdrawn  = "withdrawn"
	SentWaitingEoR = "waiting for End-of-RIB"
)

// WhyKernel is why this node has, or lacks, its kernel route.
type WhyKernel struct {
	// Wanted is the route the speaker asks the route table for, or "".
	Wanted string `json:"wanted,omitempty"`
	// Reason is why it asks for that route or for none.
	Reason string `json:"reason"`
	// RouteTable is the route table's record: who wants the prefix, what
	// its last pass wrote or why it could not.
	RouteTable []string `json:"routeTable,omitempty"`
	// Kernel is the kernel's routes to the prefix.
	Kernel []string `json:"kernel"`
	// Installed: the route the table programs is in the kernel.
	Installed bool `json:"installed"`
	// Verdict is the one-line answer.
	Verdict string `json:"verdict"`
}

// RoutesReport answers `calicoctl node routes`.
type RoutesReport struct {
	Node   string       `json:"node"`
	Routes []RouteEntry `json:"routes"`
}

// RouteEntry is one path.
type RouteEntry struct {
	Prefix  string `json:"prefix"`
	NextHop string `json:"nextHop"`
	// From is the peer's address; "" for a route this node originates.
	From     string    `json:"from,omitempty"`
	PeerName string    `json:"peerName,omitempty"`
	Received time.Time `json:"received"`
	Best     bool      `json:"best"`
	Stale    bool      `json:"stale,omitempty"`
	// Filtered: rejected by the import policy (kept by gobgp, used for
	// nothing).
	Filtered bool `json:"filtered,omitempty"`
	// Kernel is one of KernelYes, KernelBlackhole, KernelMissing,
	// KernelNotWanted, KernelOther, or "" for a path that is not the best.
	Kernel string `json:"kernel,omitempty"`
}

// RouteEntry.Kernel values.
const (
	KernelYes       = "yes"
	KernelBlackhole = "blackhole"
	KernelMissing   = "missing"
	KernelNotWanted = "not wanted"
	KernelOther     = "other source"
)

// policyNames reads the speaker's current policy: the request gobgp has
// and what its statements stand for.
type policyNames struct {
	req    *api.SetPoliciesRequest
	labels map[string]string
}

func newPolicyNames(f ExportFilter) policyNames {
	req, labels := policyDefs(f)
	return policyNames{req: req, labels: labels}
}

func (pn policyNames) label(stmt string) string {
	if l, ok := pn.labels[stmt]; ok {
		return l
	}
	return "statement " + stmt
}

func (pn policyNames) decide(dir api.PolicyDirection, r policyRoute) (verdict, string) {
	v, err := evalPolicy(pn.req, dir, r)
	if err != nil {
		return v, "the policy could not be read: " + err.Error()
	}
	return v, pn.label(v.Statement)
}

// sessionsByAddr indexes the configured sessions.
func sessionsByAddr(ss []Session) map[netip.Addr]Session {
	m := make(map[netip.Addr]Session, len(ss))
	for _, s := range ss {
		m[s.Addr] = s
	}
	return m
}

// routeType is gobgp's route type of a path: LOCAL, or by its source
// session INTERNAL (iBGP) or EXTERNAL.
func routeType(p pathFact, sessions map[netip.Addr]Session) api.Conditions_RouteType {
	if p.local() {
		return api.Conditions_ROUTE_TYPE_LOCAL
	}
	if s, ok := sessions[p.Peer]; ok && s.PeerAS == s.LocalAS {
		return api.Conditions_ROUTE_TYPE_INTERNAL
	}
	return api.Conditions_ROUTE_TYPE_EXTERNAL
}

func bestOf(paths []pathFact) (pathFact, bool) {
	for _, p := range paths {
		if p.Best {
			return p, true
		}
	}
	return pathFact{}, false
}

func age(now, t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	return formatAge(now.Sub(t))
}

// formatAge is hh:mm:ss, with days in front past one.
func formatAge(d time.Duration) string {
	d = max(d, 0).Round(time.Second)
	days := int(d / (24 * time.Hour))
	d -= time.Duration(days) * 24 * time.Hour
	s := fmt.Sprintf("%02d:%02d:%02d", int(d/time.Hour), int(d%time.Hour/time.Minute), int(d%time.Minute/time.Second))
	if days > 0 {
		s = strconv.Itoa(days) + "d " + s
	}
	return s
}

// buildWhy explains f.Prefix.
func buildWhy(f whyFacts) WhyReport {
	rep := WhyReport{Node: f.Node, Prefix: f.Prefix.String(), Peers: []WhyPeer{}}
	v := f.View
	sessions := sessionsByAddr(v.Sessions)
	pn := newPolicyNames(v.Filter)

	// Origin: the same function that decides what the speaker originates.
	var origin *Advert
	for i, a := range v.Adverts {
		if a.Prefix == f.Prefix {
			origin = &v.Adverts[i]
		}
	}
	switch {
	case !v.Enabled:
		rep.Origin = "BGP is not running on this node (no BGP address in its Node resource)"
	case origin != nil:
		rep.Origin = "originated by this node: " + origin.Why + ", next hop " + origin.NextHop.String()
	default:
		var skipped string
		adverts(v.In, func(p netip.Prefix, why string) {
			if p.Masked() == f.Prefix {
				skipped = why
			}
		})
		rep.Origin = "not originated by this node"
		if skipped != "" {
			rep.Origin += ": " + skipped
		}
	}
	if len(f.Global) == 0 && f.Withdrawn != nil {
		w := f.Withdrawn
		rep.Withdrawn = fmt.Sprintf("no path for %s: %s", age(f.Now, w.At), w.reason())
		for _, pf := range f.Peers {
			if w.Peer.IsValid() && pf.Session.Addr == w.Peer && pf.State != StateEstablished {
				rep.Withdrawn += "; the session to " + w.Peer.String() + " is " + pf.State
			}
		}
	}

	best, haveBest := bestOf(f.Global)
	for _, pf := range f.Peers {
		rep.Peers = append(rep.Peers, explainPeer(f, pf, pn, sessions, best, haveBest))
	}
	rep.Kernel = explainKernel(f, pn, sessions, best, haveBest)
	return rep
}

func explainPeer(f whyFacts, pf peerFact, pn policyNames, sessions map[netip.Addr]Session, best pathFact, haveBest bool) WhyPeer {
	s := pf.Session
	wp := WhyPeer{Peer: s.Addr.String(), Name: s.Name, Type: s.Type, State: pf.State}

	// Received: gobgp's adj-in with its import verdicts.
	in := f.AdjIn[s.Addr]
	switch {
	case len(in) == 0 && pf.PeerRestarting && pf.State == StateEstablished && !pf.EoRReceived:
		wp.Received = "nothing yet: the peer restarted and has not sent its End-of-RIB"
	case len(in) == 0:
		wp.Received = "nothing"
	default:
		var parts []string
		for _, p := range in {
			parts = append(parts, explainReceived(f, pf, p, pn, sessions))
		}
		wp.Received = strings.Join(parts, "; ")
	}

	// Sent.
	if !haveBest {
		if f.Withdrawn != nil {
			wp.Sent, wp.Detail = SentWithdrawn, "this node has had no path to it for "+age(f.Now, f.Withdrawn.At)
		} else {
			wp.Sent, wp.Detail = SentNotSent, "this node has no path to it"
		}
		return wp
	}
	would, label := pn.decide(api.PolicyDirection_EXPORT, policyRoute{Prefix: f.Prefix, Neighbor: s.Addr, Type: routeType(best, sessions)})
	wouldText := "the export policy would accept it: " + label
	if !would.Accept {
		wouldText = "the export policy would reject it: " + label
	}
	if pf.State != StateEstablished {
		wp.Sent, wp.Detail = SentNotSent, "the session is "+pf.State+"; once it is up, "+wouldText
		return wp
	}
	var out *pathFact
	for i, p := range f.AdjOut[s.Addr] {
		if p.Prefix == f.Prefix {
			out = &f.AdjOut[s.Addr][i]
			break
		}
	}
	switch {
	case out == nil:
		wp.Sent, wp.Detail = SentNotSent, notOffered(f, pf, best, sessions)+"; "+wouldText
	case out.Filtered:
		wp.Sent, wp.Detail = SentFiltered, "rejected by "+label
		if would.Accept {
			wp.Detail = "gobgp rejects it, but the export policy reads as accepting it (" + label + "): the two disagree"
		}
	case pf.LocalRestarting:
		wp.Sent, wp.Detail = SentWaitingEoR, "this node restarted: it holds its updates until every peer's End-of-RIB has come (or "+strconv.Itoa(deferralSeconds)+"s have passed); then "+wouldText
	default:
		wp.Sent, wp.Detail = SentExported, "accepted by "+label
		if !would.Accept {
			wp.Detail = "gobgp sends it, but the export policy reads as rejecting it (" + label + "): the two disagree"
		}
	}
	return wp
}

// notOffered is why gobgp offers a peer no path at all: the checks gobgp
// makes before any policy (its filterpath), named.
func notOffered(f whyFacts, pf peerFact, best pathFact, sessions map[netip.Addr]Session) string {
	s := pf.Session
	if best.Peer == s.Addr {
		return "the best path was learned from this peer"
	}
	src, known := sessions[best.Peer]
	ibgp := s.PeerAS == s.LocalAS
	if ibgp && !best.local() && known && src.PeerAS == src.LocalAS && !s.RRClient && !src.RRClient {
		return "an iBGP route is not passed to another iBGP peer (neither is a route reflector client)"
	}
	if slices.Contains(best.ASPath, s.PeerAS) {
		return "the AS path already holds the peer's AS " + strconv.FormatUint(uint64(s.PeerAS), 10)
	}
	return "gobgp offers this peer no path to it"
}

func explainReceived(f whyFacts, pf peerFact, p pathFact, pn policyNames, sessions map[netip.Addr]Session) string {
	head := "via " + p.NextHop.String() + ", age " + age(f.Now, p.Received) + ": "
	if p.Filtered {
		v, label := pn.decide(api.PolicyDirection_IMPORT, policyRoute{Prefix: p.Prefix, Neighbor: pf.Session.Addr, Type: routeType(p, sessions)})
		if v.Accept {
			return head + "rejected on import by gobgp, but the import policy reads as accepting it (" + label + "): the two disagree"
		}
		return head + "rejected on import by " + label
	}
	var status string
	inRIB := false
	for _, g := range f.Global {
		if g.Peer == p.Peer && g.NextHop == p.NextHop {
			inRIB = true
			if g.Best {
				status = "accepted, best path"
			} else {
				status = "accepted, not the best path"
				if b, ok := bestOf(f.Global); ok {
					status += " (the best is " + describeSource(b) + ")"
				}
			}
		}
	}
	if !inRIB {
		status = "accepted"
	}
	if p.Stale {
		status += "; held stale by graceful restart: " + staleWhy(f, pf)
	}
	return head + status
}

func describeSource(p pathFact) string {
	if p.local() {
		return "this node's own"
	}
	return "from " + p.Peer.String()
}

func staleWhy(f whyFacts, pf peerFact) string {
	if pf.State == StateEstablished {
		return "the peer is back after a restart; its old routes stay until its End-of-RIB"
	}
	s := "the peer is restarting"
	if !pf.Downtime.IsZero() {
		s += " (down for " + age(f.Now, pf.Downtime) + ")"
	}
	if pf.PeerRestartTime > 0 {
		s += "; its routes stay until it is back and sends End-of-RIB, at most its restart time of " + pf.PeerRestartTime.String()
	}
	return s
}

// explainKernel: the route the speaker wants for the prefix (the same
// functions that compute its route set), what it last handed the route
// table, the table's record, and the kernel.
func explainKernel(f whyFacts, pn policyNames, sessions map[netip.Addr]Session, best pathFact, haveBest bool) WhyKernel {
	var k WhyKernel
	want, reason := speakerWants(f, pn, sessions, best, haveBest)
	k.Reason = reason
	if want != nil {
		k.Wanted = want.String()
	}
	for _, kr := range f.Kernel {
		k.Kernel = append(k.Kernel, kr.String())
	}
	if f.KernelErr != "" {
		k.Kernel = append(k.Kernel, "could not read the kernel's routes: "+f.KernelErr)
	}
	var ours *kernelRoute
	for i, kr := range f.Kernel {
		if kr.Proto == 80 && (kr.Table == 0 || kr.Table == 254) {
			ours = &f.Kernel[i]
		}
	}
	code, verdict := kernelVerdict(f, want, reason, ours, &k)
	k.Installed = code == KernelYes || code == KernelBlackhole
	k.Verdict = verdict
	return k
}

// speakerWants is the route this node's speaker asks the route table for,
// with the reason, or nil and why none.
func speakerWants(f whyFacts, pn policyNames, sessions map[netip.Addr]Session, best pathFact, haveBest bool) (*routes.Route, string) {
	v := f.View
	if !v.Enabled {
		return nil, "BGP is not running on this node"
	}
	var skipped string
	for _, r := range blackholes(v.In, func(p netip.Prefix, why string) {
		if p == f.Prefix {
			skipped = why
		}
	}) {
		if r.Dst == f.Prefix {
			return &r, "own block: a blackhole for its unallocated addresses"
		}
	}
	if skipped != "" {
		return nil, skipped
	}
	for _, a := range v.Adverts {
		if a.Prefix == f.Prefix {
			return nil, "this node originates it (" + a.Why + "); BGP installs no route to it here"
		}
	}
	if !haveBest {
		return nil, "no best path: " + noBestWhy(f, pn, sessions)
	}
	if best.local() {
		return nil, "the best path is this node's own"
	}
	r, why := newImporter(v.In, v.Adverts).route(Learned{Prefix: f.Prefix, NextHop: best.NextHop, Peer: best.Peer})
	if why != "" {
		return nil, "the best path (from " + best.Peer.String() + " via " + best.NextHop.String() + ") is not installed: " + why
	}
	return &r, "best path from " + best.Peer.String() + " via " + best.NextHop.String()
}

// noBestWhy: why the global RIB holds no path.
func noBestWhy(f whyFacts, pn policyNames, sessions map[netip.Addr]Session) string {
	var rejected []string
	received := 0
	for _, pf := range f.Peers {
		for _, p := range f.AdjIn[pf.Session.Addr] {
			received++
			if p.Filtered {
				_, label := pn.decide(api.PolicyDirection_IMPORT, policyRoute{Prefix: p.Prefix, Neighbor: pf.Session.Addr, Type: routeType(p, sessions)})
				rejected = append(rejected, "the path from "+pf.Session.Addr.String()+" was rejected on import by "+label)
			}
		}
	}
	switch {
	case len(rejected) > 0:
		if len(rejected) == 1 && received == 1 {
			return "the only " + strings.TrimPrefix(rejected[0], "the ")
		}
		return strings.Join(rejected, "; ")
	case f.Withdrawn != nil:
		return "the last path went away " + age(f.Now, f.Withdrawn.At) + " ago"
	}
	return "no peer sent a path to it"
}

// kernelVerdict compares what the speaker and the route table want with
// the kernel, filling k.RouteTable.
func kernelVerdict(f whyFacts, want *routes.Route, reason string, ours *kernelRoute, k *WhyKernel) (string, string) {
	table := f.Table
	var programmed *routes.Want // the route the table programs for the prefix
	if table != nil {
		for i, w := range table.Wanted {
			k.RouteTable = append(k.RouteTable, "wanted by "+w.Source+": "+w.Text)
			if programmed == nil && (w.Route.Table == 0 || w.Route.Table == 254) {
				programmed = &table.Wanted[i]
			}
		}
		if table.Applied != nil {
			k.RouteTable = append(k.RouteTable, "last pass wrote: "+table.Applied.Text)
		}
		if table.Problem != "" {
			k.RouteTable = append(k.RouteTable, "last pass: "+table.Problem)
		}
		if table.Passes == 0 {
			k.RouteTable = append(k.RouteTable, "no pass yet: the table waits for every route source's first set")
		}
	}
	published := false
	if want != nil {
		for _, r := range f.View.Published {
			if r == *want {
				published = true
			}
		}
	}
	kernelHas := func(r routes.Route) bool {
		return ours != nil && ours.Type == r.Type && ours.Gw == r.Via && (r.Dev == "" || ours.Dev == r.Dev)
	}
	switch {
	case want == nil && ours == nil:
		return KernelNotWanted, "no route: " + reason
	case want == nil:
		src := "another source"
		if programmed != nil {
			src = programmed.Source
			if kernelHas(programmed.Route) {
				return KernelOther, "not BGP's (" + reason + "); installed for " + src + ": " + ours.String()
			}
		}
		return KernelOther, "not BGP's (" + reason + "); the kernel has " + ours.String() + " (" + src + ")"
	}
	// The speaker wants a route.
	what := reason
	if want.Type == routes.Blackhole {
		what = "own block, blackhole route"
	}
	if !published {
		return KernelMissing, "not installed yet: the speaker has not handed " + want.String() + " to the route table (its updates are batched)"
	}
	if table != nil && programmed != nil && programmed.Source != routes.SourceBGP {
		if kernelHas(programmed.Route) {
			return KernelOther, what + "; but " + programmed.Source + "'s route takes precedence and is installed: " + ours.String()
		}
		return KernelOther, what + "; but " + programmed.Source + "'s route takes precedence: " + programmed.Text
	}
	if kernelHas(*want) {
		code := KernelYes
		if want.Type == routes.Blackhole {
			code = KernelBlackhole
		}
		return code, "installed: " + what + "; in table main, proto 80"
	}
	missing := "not installed: " + what + ", but the kernel has no such route"
	if ours != nil {
		missing = "not installed: " + what + ", but the kernel's route is " + ours.String()
	}
	if want.Via.IsValid() && !want.OnLink {
		if r, ok := f.Reach[want.Via]; ok && r.Err != "" {
			missing += "; next hop " + want.Via.String() + " is unreachable (" + r.Err + ")"
		}
	}
	if table != nil && table.Problem != "" {
		missing += "; the route table's last pass: " + table.Problem
	} else if table != nil && table.Passes == 0 {
		missing += "; the route table has not written anything yet"
	} else if table != nil && table.Applied != nil && table.Applied.Route == *want {
		missing += "; the route table wrote it, so it was removed behind its back (the next refresh restores it)"
	}
	return KernelMissing, missing
}

// buildRoutes lists every path of the global RIB, and the paths the
// import policy rejected, with the kernel verdict of each best path.
// kernelOf gives the kernel's routes and the route table's view of a
// prefix.
func buildRoutes(node string, view explainView, global []pathFact, rejected []pathFact, kernelOf func(netip.Prefix) whyFacts) RoutesReport {
	rep := RoutesReport{Node: node, Routes: []RouteEntry{}}
	sessions := sessionsByAddr(view.Sessions)
	pn := newPolicyNames(view.Filter)
	entry := func(p pathFact) RouteEntry {
		e := RouteEntry{Prefix: p.Prefix.String(), NextHop: p.NextHop.String(), Received: p.Received, Best: p.Best, Stale: p.Stale, Filtered: p.Filtered}
		if !p.NextHop.IsValid() {
			e.NextHop = ""
		}
		if !p.local() {
			e.From = p.Peer.String()
			e.PeerName = sessions[p.Peer].Name
		}
		return e
	}
	byPrefix := map[netip.Prefix][]pathFact{}
	for _, p := range global {
		byPrefix[p.Prefix] = append(byPrefix[p.Prefix], p)
	}
	for _, p := range global {
		e := entry(p)
		if p.Best {
			f := kernelOf(p.Prefix)
			f.View, f.Global = view, byPrefix[p.Prefix]
			want, reason := speakerWants(f, pn, sessions, p, true)
			var ours *kernelRoute
			for i, kr := range f.Kernel {
				if kr.Proto == 80 && (kr.Table == 0 || kr.Table == 254) {
					ours = &f.Kernel[i]
				}
			}
			var k WhyKernel
			e.Kernel, _ = kernelVerdict(f, want, reason, ours, &k)
		}
		rep.Routes = append(rep.Routes, e)
	}
	for _, p := range rejected {
		rep.Routes = append(rep.Routes, entry(p))
	}
	slices.SortStableFunc(rep.Routes, func(a, b RouteEntry) int {
		pa, pb := netip.MustParsePrefix(a.Prefix), netip.MustParsePrefix(b.Prefix)
		if c := comparePrefix(pa, pb); c != 0 {
			return c
		}
		if a.Best != b.Best {
			if a.Best {
				return -1
			}
			return 1
		}
		if a.Filtered != b.Filtered {
			if b.Filtered {
				return -1
			}
			return 1
		}
		return strings.Compare(a.From, b.From)
	})
	return rep
}
