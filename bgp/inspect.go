package bgp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v3/api"

	"github.com/projectcalico/calico-node/agent/routes"
)

// RouteInspector is the route table's record of one destination;
// *routetable.Table implements it.
type RouteInspector interface {
	Inspect(dst netip.Prefix) routes.Inspection
}

// kernelReader reads the kernel's routes in the agent's namespace
// (kernel_linux.go).
type kernelReader interface {
	// routes lists the routes of every table and protocol, to dst only
	// when dst is valid.
	routes(dst netip.Prefix) ([]kernelRoute, error)
	// reach is the kernel's route to a (ip route get), or why it has none.
	reach(a netip.Addr) (string, error)
}

// errBGPOff answers queries while the speaker is not running.
var errBGPOff = errors.New("BGP is not running on this node")

// history remembers, for a while, the prefixes this node lost its last
// path to, so that `bgp why` can say "withdrawn" rather than "unknown".
type history struct {
	mu sync.Mutex
	m  map[netip.Prefix]entry
	// order is the prefixes in the order they were added, oldest first,
	// with the sequence number of that addition: an element whose prefix
	// was deleted or added again since is stale and skipped. Evicting the
	// oldest costs O(1) on average, where a scan of m cost 4096 map steps
	// for every withdrawal of a 10,000-route withdrawal burst.
	order []seqPrefix
	seq   uint64
}

type entry struct {
	w   withdrawal
	seq uint64
}

type seqPrefix struct {
	p   netip.Prefix
	seq uint64
}

const historySize = 4096

func (h *history) add(p netip.Prefix, w withdrawal) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[netip.Prefix]entry{}
	}
	if _, ok := h.m[p]; !ok && len(h.m) >= historySize {
		// Forget the oldest.
		for len(h.order) > 0 {
			o := h.order[0]
			h.order = h.order[1:]
			if e, ok := h.m[o.p]; ok && e.seq == o.seq {
				delete(h.m, o.p)
				break
			}
		}
	}
	h.seq++
	h.m[p] = entry{w: w, seq: h.seq}
	h.order = append(h.order, seqPrefix{p, h.seq})
	if len(h.order) > 4*historySize {
		// Mostly stale (deleted or re-added prefixes): keep the live.
		live := make([]seqPrefix, 0, len(h.m))
		for _, o := range h.order {
			if e, ok := h.m[o.p]; ok && e.seq == o.seq {
				live = append(live, o)
			}
		}
		h.order = live
	}
}

func (h *history) del(p netip.Prefix) {
	h.mu.Lock()
	delete(h.m, p)
	h.mu.Unlock()
}

func (h *history) get(p netip.Prefix) *withdrawal {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e, ok := h.m[p]; ok {
		return &e.w
	}
	return nil
}

// decodePath turns a listed gobgp path into a pathFact.
func decodePath(p *api.Path) (pathFact, error) {
	var f pathFact
	var err error
	if f.Prefix, err = pathPrefix(p); err != nil {
		return f, err
	}
	if peer, err := netip.ParseAddr(p.NeighborIp); err == nil && !peer.IsUnspecified() {
		f.Peer = peer.Unmap()
	}
	if p.Age != nil {
		f.Received = p.Age.AsTime()
	}
	f.Best, f.Stale, f.Filtered = p.Best, p.Stale, p.Filtered
	for _, a := range p.Pattrs {
		if a.MessageIs(&api.AsPathAttribute{}) {
			var ap api.AsPathAttribute
			if err := a.UnmarshalTo(&ap); err == nil {
				for _, seg := range ap.Segments {
					f.ASPath = append(f.ASPath, seg.Numbers...)
				}
			}
		}
	}
	f.NextHop = pathNextHop(p)
	return f, nil
}

// listPaths lists a gobgp table: the global RIB (peer invalid) or a
// peer's adj-in / adj-out, of one family, for one prefix when pfx is
// valid, with gobgp's filtered flags on peer tables.
func (a *Actor) listPaths(ctx context.Context, tt api.TableType, peer netip.Addr, fam *api.Family, pfx netip.Prefix) ([]pathFact, error) {
	req := &api.ListPathRequest{TableType: tt, Family: fam, EnableFiltered: tt != api.TableType_GLOBAL}
	if peer.IsValid() {
		req.Name = peer.String()
	}
	if pfx.IsValid() {
		req.Prefixes = []*api.TableLookupPrefix{{Prefix: pfx.String(), Type: api.TableLookupPrefix_EXACT}}
	}
	var out []pathFact
	var errs []error
	err := a.bgp.ListPath(ctx, req, func(d *api.Destination) {
		for _, p := range d.Paths {
			f, err := decodePath(p)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out = append(out, f)
		}
	})
	if err != nil {
		what := "global RIB"
		if peer.IsValid() {
			what = tt.String() + " of " + peer.String()
		}
		return nil, fmt.Errorf("list %s: %w", what, err)
	}
	return out, errors.Join(errs...)
}

// peerFacts reads every configured session's state from gobgp, in the
// sessions' order; fam selects the End-of-RIB flags.
func (a *Actor) peerFacts(ctx context.Context, sessions []Session, fam *api.Family) ([]peerFact, error) {
	got := map[netip.Addr]*api.Peer{}
	err := a.bgp.ListPeer(ctx, &api.ListPeerRequest{}, func(p *api.Peer) {
		if p.Conf == nil {
			return
		}
		if addr, err := netip.ParseAddr(p.Conf.NeighborAddress); err == nil {
			got[addr.Unmap()] = p
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list BGP peers: %w", err)
	}
	var out []peerFact
	for _, s := range sessions {
		pf := peerFact{Session: s, State: "not configured in the speaker"}
		p, ok := got[s.Addr]
		if ok {
			if p.State != nil {
				pf.State = sessionState(p.State.SessionState)
			}
			if gr := p.GracefulRestart; gr != nil {
				pf.PeerRestarting, pf.LocalRestarting = gr.PeerRestarting, gr.LocalRestarting
				pf.PeerRestartTime = time.Duration(gr.PeerRestartTime) * time.Second
			}
			if p.Timers != nil && p.Timers.State != nil && p.Timers.State.Downtime != nil {
				pf.Downtime = p.Timers.State.Downtime.AsTime()
			}
			for _, af := range p.AfiSafis {
				if af.Config == nil || af.Config.Family == nil || af.MpGracefulRestart == nil || af.MpGracefulRestart.State == nil {
					continue
				}
				if fam != nil && af.Config.Family.Afi == fam.Afi {
					pf.EoRReceived = af.MpGracefulRestart.State.EndOfRibReceived
					pf.EoRSent = af.MpGracefulRestart.State.EndOfRibSent
				}
			}
		}
		out = append(out, pf)
	}
	return out, nil
}

func (a *Actor) currentView() (explainView, error) {
	v := a.view.Load()
	if v == nil || !v.Enabled || a.bgp == nil {
		return explainView{}, errBGPOff
	}
	return *v, nil
}

// Why gathers the facts about prefix and explains them.
func (a *Actor) Why(ctx context.Context, prefix netip.Prefix) (*WhyReport, error) {
	if prefix.Addr().Is4In6() {
		prefix = netip.PrefixFrom(prefix.Addr().Unmap(), prefix.Bits()-96)
	}
	if !prefix.IsValid() {
		return nil, fmt.Errorf("invalid prefix %s", prefix)
	}
	prefix = prefix.Masked()
	v, err := a.currentView()
	if err != nil {
		return nil, err
	}
	fam := familyOf(prefix.Addr())
	f := whyFacts{Node: a.cfg.NodeName, Prefix: prefix, Now: a.now(), View: v,
		AdjIn: map[netip.Addr][]pathFact{}, AdjOut: map[netip.Addr][]pathFact{}, Reach: map[netip.Addr]reach{}}
	if f.Global, err = a.listPaths(ctx, api.TableType_GLOBAL, netip.Addr{}, fam, prefix); err != nil {
		return nil, err
	}
	var sessions []Session
	for _, s := range v.Sessions {
		if s.Addr.Is4() == prefix.Addr().Is4() {
			sessions = append(sessions, s)
		}
	}
	if f.Peers, err = a.peerFacts(ctx, sessions, fam); err != nil {
		return nil, err
	}
	for _, pf := range f.Peers {
		if pf.State == "not configured in the speaker" {
			continue
		}
		addr := pf.Session.Addr
		if f.AdjIn[addr], err = a.listPaths(ctx, api.TableType_ADJ_IN, addr, fam, prefix); err != nil {
			return nil, err
		}
		if f.AdjOut[addr], err = a.listPaths(ctx, api.TableType_ADJ_OUT, addr, fam, prefix); err != nil {
			return nil, err
		}
	}
	f.Withdrawn = a.hist.get(prefix)
	if a.cfg.Routes != nil {
		in := a.cfg.Routes.Inspect(prefix)
		f.Table = &in
	}
	if f.Kernel, err = a.kernel.routes(prefix); err != nil {
		f.KernelErr = err.Error()
	}
	for _, p := range f.Global {
		if p.Best && p.NextHop.IsValid() {
			r := reach{}
			if via, err := a.kernel.reach(p.NextHop); err != nil {
				r.Err = err.Error()
			} else {
				r.Via = via
			}
			f.Reach[p.NextHop] = r
		}
	}
	rep := buildWhy(f)
	return &rep, nil
}

// Routes lists the speaker's paths.
func (a *Actor) Routes(ctx context.Context) (*RoutesReport, error) {
	v, err := a.currentView()
	if err != nil {
		return nil, err
	}
	var global, rejected []pathFact
	for _, fam := range []*api.Family{familyV4, familyV6} {
		ps, err := a.listPaths(ctx, api.TableType_GLOBAL, netip.Addr{}, fam, netip.Prefix{})
		if err != nil {
			return nil, err
		}
		global = append(global, ps...)
	}
	for _, s := range v.Sessions {
		ps, err := a.listPaths(ctx, api.TableType_ADJ_IN, s.Addr, familyOf(s.Addr), netip.Prefix{})
		if err != nil {
			// A session gobgp does not have (AddPeer failed): nothing
			// received from it.
			continue
		}
		for _, p := range ps {
			if p.Filtered {
				rejected = append(rejected, p)
			}
		}
	}
	kernel := map[netip.Prefix][]kernelRoute{}
	all, kerr := a.kernel.routes(netip.Prefix{})
	for _, r := range all {
		kernel[r.Dst] = append(kernel[r.Dst], r)
	}
	rep := buildRoutes(a.cfg.NodeName, v, global, rejected, func(p netip.Prefix) whyFacts {
		f := whyFacts{Prefix: p, Kernel: kernel[p]}
		if kerr != nil {
			f.KernelErr = kerr.Error()
		}
		if a.cfg.Routes != nil {
			in := a.cfg.Routes.Inspect(p)
			f.Table = &in
		}
		return f
	})
	return &rep, nil
}
