package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/server"
	"google.golang.org/protobuf/types/known/anypb"
)

var (
	familyV4 = &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	familyV6 = &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
)

func familyOf(a netip.Addr) *api.Family {
	if a.Is4() {
		return familyV4
	}
	return familyV6
}

// Timers. Calico's BIRD template connects after 2 s and retries every 5 s;
// gobgp's defaults (120 s retry) would leave a restarted peer unconnected
// for minutes.
const (
	connectRetrySeconds = 5
	// deferralSeconds bounds how long a restarting speaker waits for its
	// peers' End-of-RIB before advertising anyway (RFC 4724's selection
	// deferral timer).
	deferralSeconds = 60
	// maxRestartSeconds is the largest restart time the GR capability can
	// carry (12 bits).
	maxRestartSeconds = 4095
)

// globalConf is what a running gobgp instance was started with; a change
// restarts the speaker (and every session), as a BIRD reconfiguration of
// the router ID or AS does.
type globalConf struct {
	routerID netip.Addr
	as       uint32
	port     uint16
	listen   string // "" = all addresses, else the node IP(s) joined by ","
}

// speaker drives one gobgp server: it diffs desired sessions, export
// filter and originated paths against what it last configured. Only the
// actor goroutine calls its methods.
type speaker struct {
	s    *server.BgpServer
	log  *slog.Logger
	book *statusBook

	running bool
	global  globalConf
	peers   map[netip.Addr]Session
	paths   map[netip.Prefix]pathEntry
	filter  *ExportFilter
	// restarting marks the sessions of the first configuration after start
	// as "restarting" (RFC 4724 R and F bits), so that peers which kept our
	// routes through an agent restart hold them until we have re-sent them,
	// like Calico runs BIRD with -R.
	restarting bool
	md5        md5Prober
}

type pathEntry struct {
	advert Advert
	uuid   []byte
}

func newSpeaker(s *server.BgpServer, book *statusBook, logger *slog.Logger) *speaker {
	return &speaker{s: s, log: logger, book: book, restarting: true, md5: probeMD5}
}

// ensureGlobal starts gobgp with g, restarting it if it runs with
// something else. It reports whether a (re)start happened.
func (sp *speaker) ensureGlobal(ctx context.Context, g globalConf) (bool, error) {
	if sp.running && sp.global == g {
		return false, nil
	}
	if sp.running {
		sp.log.Info("BGP identity changed; restarting the speaker", "routerID", g.routerID, "as", g.as, "port", g.port)
		if err := sp.s.StopBgp(ctx, &api.StopBgpRequest{}); err != nil {
			return false, fmt.Errorf("stop BGP: %w", err)
		}
		sp.running = false
	}
	sp.peers, sp.paths, sp.filter = map[netip.Addr]Session{}, map[netip.Prefix]pathEntry{}, nil
	sp.book.setPeers(nil)
	var addrs []string
	if g.listen != "" {
		addrs = strings.Split(g.listen, ",")
	}
	start := func(addrs []string) error {
		return sp.s.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
			Asn: g.as, RouterId: g.routerID.String(), ListenPort: int32(g.port), ListenAddresses: addrs,
		}})
	}
	err := start(addrs)
	if err != nil && len(addrs) == 0 {
		// A kernel without IPv6 cannot listen on "::"; fall back to IPv4.
		sp.log.Warn("BGP cannot listen on all IPv4 and IPv6 addresses; listening on IPv4 only", "port", g.port, "err", err)
		_ = sp.s.StopBgp(ctx, &api.StopBgpRequest{})
		err = start([]string{"0.0.0.0"})
	}
	if err != nil {
		_ = sp.s.StopBgp(ctx, &api.StopBgpRequest{})
		return false, fmt.Errorf("start BGP (router ID %s, AS %d, port %d): %w", g.routerID, g.as, g.port, err)
	}
	sp.running, sp.global = true, g
	sp.log.Info("BGP speaker started", "routerID", g.routerID, "as", g.as, "port", g.port)
	return true, nil
}

// stop ends the speaker. Sessions are cut without a NOTIFICATION first
// (see abortSessions) so that peers treat it as a restart and keep our
// routes for the graceful-restart time.
func (sp *speaker) stop(ctx context.Context, graceful bool) {
	if !sp.running {
		return
	}
	if graceful {
		addrs := map[netip.Addr]uint16{}
		for a, s := range sp.peers {
			addrs[a] = s.RemotePort()
		}
		if n, err := abortSessions(addrs, sp.global.port); err != nil {
			sp.log.Warn("could not cut BGP sessions for graceful restart; peers will withdraw our routes now", "err", err)
		} else {
			sp.log.Info("BGP sessions closed for graceful restart", "sessions", n)
		}
	}
	if err := sp.s.StopBgp(ctx, &api.StopBgpRequest{}); err != nil {
		sp.log.Warn("stop BGP", "err", err)
	}
	sp.running = false
}

// syncPeers adds, removes and replaces sessions. A session whose settings
// changed is deleted and re-added; all others are left alone.
func (sp *speaker) syncPeers(ctx context.Context, want []Session) error {
	wantBy := map[netip.Addr]Session{}
	for _, s := range want {
		wantBy[s.Addr] = s
	}
	var errs []error
	for addr, cur := range sp.peers {
		w, ok := wantBy[addr]
		if ok && sessionEqual(cur, w) {
			continue
		}
		if err := sp.s.DeletePeer(ctx, &api.DeletePeerRequest{Address: addr.String()}); err != nil {
			errs = append(errs, fmt.Errorf("delete BGP peer %s: %w", addr, err))
			continue
		}
		delete(sp.peers, addr)
		if !ok {
			sp.log.Info("BGP session removed", "peer", addr, "name", cur.Name)
		}
	}
	for _, s := range want {
		if _, ok := sp.peers[s.Addr]; ok {
			continue
		}
		if err := sp.s.AddPeer(ctx, &api.AddPeerRequest{Peer: sp.apiPeer(s)}); err != nil {
			errs = append(errs, fmt.Errorf("add BGP peer %s: %w", s.Addr, err))
			continue
		}
		sp.peers[s.Addr] = s
		sp.log.Info("BGP session configured", "peer", s.Addr, "name", s.Name, "type", string(s.Type), "as", s.PeerAS, "passive", s.Passive, "rrClient", s.RRClient)
	}
	// Only the first configuration after start is a restart.
	sp.restarting = false
	var cur []Session
	for _, s := range want {
		if _, ok := sp.peers[s.Addr]; ok {
			cur = append(cur, s)
		}
	}
	sp.book.setPeers(cur)
	for _, s := range cur {
		switch {
		case s.PasswordError != "":
			sp.book.setError(s.Addr, s.PasswordError)
		case s.Password != "":
			if err := sp.md5(s.Addr); err != nil {
				sp.book.setError(s.Addr, "TCP MD5 signatures (BGP password) not supported by this kernel: "+err.Error())
			}
		}
	}
	return errors.Join(errs...)
}

func sessionEqual(a, b Session) bool {
	// Passwords and everything else that reaches gobgp; Name and PeerNode
	// are only labels.
	a.Name, b.Name, a.PeerNode, b.PeerNode = "", "", "", ""
	return a == b
}

func (sp *speaker) apiPeer(s Session) *api.Peer {
	restart := uint32(s.Restart().Seconds())
	restart = min(restart, maxRestartSeconds)
	p := &api.Peer{
		Conf: &api.PeerConf{
			NeighborAddress: s.Addr.String(),
			PeerAsn:         s.PeerAS,
			LocalAsn:        s.LocalAS,
			AuthPassword:    s.Password,
			Description:     s.Name,
			AllowOwnAsn:     s.AllowLocalAS,
		},
		Transport: &api.Transport{
			RemotePort:  uint32(s.RemotePort()),
			PassiveMode: s.Passive,
		},
		Timers: &api.Timers{Config: &api.TimersConfig{ConnectRetry: connectRetrySeconds}},
		GracefulRestart: &api.GracefulRestart{
			Enabled:         true,
			RestartTime:     restart,
			DeferralTime:    deferralSeconds,
			LocalRestarting: sp.restarting,
		},
		AfiSafis: []*api.AfiSafi{{
			Config:            &api.AfiSafiConfig{Family: familyOf(s.Addr), Enabled: true},
			MpGracefulRestart: &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}},
		}},
	}
	if s.Source.IsValid() {
		p.Transport.LocalAddress = s.Source.String()
	}
	if s.RRClient {
		p.RouteReflector = &api.RouteReflector{RouteReflectorClient: true, RouteReflectorClusterId: s.ClusterID}
	}
	switch {
	case s.TTLSecurity > 0:
		p.TtlSecurity = &api.TtlSecurity{Enabled: true, TtlMin: uint32(256 - int(s.TTLSecurity))}
	case s.PeerAS != s.LocalAS:
		// Calico's BIRD peers are all "multihop": an external peer need not
		// be on the node's link.
		p.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: 255}
	}
	return p
}

// syncFilter installs the export filter when it changed, then re-sends
// every session's routes through it.
func (sp *speaker) syncFilter(ctx context.Context, f ExportFilter) error {
	if sp.filter != nil && sp.filter.equal(f) {
		return nil
	}
	req := policyRequest(f)
	if err := sp.s.SetPolicies(ctx, req); err != nil {
		return fmt.Errorf("set BGP export policy: %w", err)
	}
	first := sp.filter == nil
	if first {
		// SetPolicies replaces the definitions but keeps the assignments
		// it finds (it ignores req.Assignments): assign once per gobgp
		// start. Later definitions keep the policy names.
		for _, as := range req.Assignments {
			if err := sp.s.SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: as}); err != nil {
				return fmt.Errorf("assign BGP %s policy: %w", strings.ToLower(as.Direction.String()), err)
			}
		}
	}
	sp.filter = &f
	if first {
		return nil
	}
	var errs []error
	for addr := range sp.peers {
		if sp.book.established(addr) {
			// Both ways: BGPFilter import rules may have changed too (gobgp
			// keeps what peers sent and runs it through the new policy).
			if err := sp.s.ResetPeer(ctx, &api.ResetPeerRequest{Address: addr.String(), Soft: true, Direction: api.ResetPeerRequest_BOTH}); err != nil {
				errs = append(errs, fmt.Errorf("re-send routes to %s: %w", addr, err))
			}
		}
	}
	return errors.Join(errs...)
}

const (
	exportPolicy = "calico-export"
	importPolicy = "calico-import"
)

func policyRequest(f ExportFilter) *api.SetPoliciesRequest {
	req, _ := policyDefs(f)
	return req
}

// policyDefs is the policy request, and what each of its statements
// stands for (by statement name), for `bgp why`.
func policyDefs(f ExportFilter) (*api.SetPoliciesRequest, map[string]string) {
	req := &api.SetPoliciesRequest{}
	labels := map[string]string{}
	var stmts []*api.Statement
	nbrSet := func(name string, addrs []netip.Addr, action *api.NexthopAction, label string) {
		if len(addrs) == 0 {
			return
		}
		ds := &api.DefinedSet{DefinedType: api.DefinedType_NEIGHBOR, Name: name}
		for _, a := range addrs {
			ds.List = append(ds.List, netip.PrefixFrom(a, a.BitLen()).String())
		}
		req.DefinedSets = append(req.DefinedSets, ds)
		stmts = append(stmts, &api.Statement{
			Name:       name,
			Conditions: &api.Conditions{NeighborSet: &api.MatchSet{Type: api.MatchSet_ANY, Name: name}},
			Actions:    &api.Actions{Nexthop: action},
		})
		labels[name] = label
	}
	nbrSet("calico-nexthop-keep", f.KeepNextHop, &api.NexthopAction{Unchanged: true}, "keep the original next hop (BGPPeer keepOriginalNextHop / nextHopMode Keep)")
	nbrSet("calico-nexthop-self", f.SelfNextHop, &api.NexthopAction{Self: true}, "next hop self (BGPPeer nextHopMode Self)")
	// The BGPFilters come first: in BIRD they run before Calico's own
	// export filter, on locally originated routes too.
	fp := buildFilterPolicy(f.PeerFilters, f.Specs)
	req.DefinedSets = append(req.DefinedSets, fp.defined...)
	stmts = append(stmts, fp.exports...)
	maps.Copy(labels, fp.labels)
	labels["calico-local"] = "Calico export: a route this node originates"
	stmts = append(stmts, &api.Statement{
		Name:       "calico-local",
		Conditions: &api.Conditions{RouteType: api.Conditions_ROUTE_TYPE_LOCAL},
		Actions:    &api.Actions{RouteAction: api.RouteAction_ACCEPT},
	})
	prefixSet := func(name string, ps []netip.Prefix, exact bool, action api.RouteAction, label string) {
		// gobgp wants one address family per set.
		for _, v4 := range []bool{true, false} {
			fam := "-v6"
			if v4 {
				fam = "-v4"
			}
			ds := &api.DefinedSet{DefinedType: api.DefinedType_PREFIX, Name: name + fam}
			for _, p := range ps {
				if p.Addr().Is4() != v4 {
					continue
				}
				maxLen := uint32(p.Addr().BitLen())
				if exact {
					maxLen = uint32(p.Bits())
				}
				ds.Prefixes = append(ds.Prefixes, &api.Prefix{IpPrefix: p.String(), MaskLengthMin: uint32(p.Bits()), MaskLengthMax: maxLen})
			}
			if len(ds.Prefixes) == 0 {
				continue
			}
			req.DefinedSets = append(req.DefinedSets, ds)
			labels[ds.Name] = label
			stmts = append(stmts, &api.Statement{
				Name:       ds.Name,
				Conditions: &api.Conditions{PrefixSet: &api.MatchSet{Type: api.MatchSet_ANY, Name: ds.Name}},
				Actions:    &api.Actions{RouteAction: action},
			})
		}
	}
	prefixSet("calico-no-export-pools", f.Reject, false, api.RouteAction_REJECT, "Calico export: inside an IP pool with disableBGPExport")
	prefixSet("calico-pools", f.Accept, false, api.RouteAction_ACCEPT, "Calico export: inside an IP pool")
	prefixSet("calico-services", f.Services, false, api.RouteAction_ACCEPT, "Calico export: a service address")
	pol := &api.Policy{Name: exportPolicy, Statements: stmts}
	req.Policies = []*api.Policy{pol}
	req.Assignments = []*api.PolicyAssignment{{
		Name: "global", Direction: api.PolicyDirection_EXPORT,
		Policies: []*api.Policy{{Name: exportPolicy}}, DefaultAction: api.RouteAction_REJECT,
	}}
	// What no rule decides is imported, as BIRD's "accept" after the
	// filters' import functions. The policy exists (empty) without
	// filters too, so that its assignment stays valid.
	req.Policies = append(req.Policies, &api.Policy{Name: importPolicy, Statements: fp.imports})
	req.Assignments = append(req.Assignments, &api.PolicyAssignment{
		Name: "global", Direction: api.PolicyDirection_IMPORT,
		Policies: []*api.Policy{{Name: importPolicy}}, DefaultAction: api.RouteAction_ACCEPT,
	})
	labels[defaultLabel(api.PolicyDirection_EXPORT)] = "Calico export: nothing else is passed on (outside every IP pool and service address)"
	labels[defaultLabel(api.PolicyDirection_IMPORT)] = "Calico import: everything no BGPFilter rule rejects"
	return req, labels
}

// syncPaths originates what is wanted and withdraws what is not.
func (sp *speaker) syncPaths(ctx context.Context, want []Advert) error {
	wantBy := map[netip.Prefix]Advert{}
	for _, a := range want {
		wantBy[a.Prefix] = a
	}
	var errs []error
	for p, cur := range sp.paths {
		if w, ok := wantBy[p]; ok && w.equal(cur.advert) {
			continue
		}
		if err := sp.s.DeletePath(ctx, &api.DeletePathRequest{TableType: api.TableType_GLOBAL, Family: familyOf(p.Addr()), Uuid: cur.uuid}); err != nil {
			errs = append(errs, fmt.Errorf("withdraw %s: %w", p, err))
			continue
		}
		delete(sp.paths, p)
	}
	for _, a := range want {
		if _, ok := sp.paths[a.Prefix]; ok {
			continue
		}
		path, err := apiPath(a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		resp, err := sp.s.AddPath(ctx, &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: path})
		if err != nil {
			errs = append(errs, fmt.Errorf("advertise %s: %w", a.Prefix, err))
			continue
		}
		sp.paths[a.Prefix] = pathEntry{advert: a, uuid: resp.Uuid}
	}
	return errors.Join(errs...)
}

func apiPath(a Advert) (*api.Path, error) {
	fam := familyOf(a.Prefix.Addr())
	nlri, err := anypb.New(&api.IPAddressPrefix{Prefix: a.Prefix.Addr().String(), PrefixLen: uint32(a.Prefix.Bits())})
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", a.Prefix, err)
	}
	origin, _ := anypb.New(&api.OriginAttribute{Origin: 0}) // IGP
	attrs := []*anypb.Any{origin}
	if a.Prefix.Addr().Is4() {
		nh, _ := anypb.New(&api.NextHopAttribute{NextHop: a.NextHop.String()})
		attrs = append(attrs, nh)
	} else {
		mp, _ := anypb.New(&api.MpReachNLRIAttribute{Family: fam, NextHops: []string{a.NextHop.String()}, Nlris: []*anypb.Any{nlri}})
		attrs = append(attrs, mp)
	}
	if len(a.Communities) > 0 {
		c, _ := anypb.New(&api.CommunitiesAttribute{Communities: slices.Clone(a.Communities)})
		attrs = append(attrs, c)
	}
	if len(a.Large) > 0 {
		lc := &api.LargeCommunitiesAttribute{}
		for _, l := range a.Large {
			lc.Communities = append(lc.Communities, &api.LargeCommunity{GlobalAdmin: l[0], LocalData1: l[1], LocalData2: l[2]})
		}
		c, _ := anypb.New(lc)
		attrs = append(attrs, c)
	}
	return &api.Path{Family: fam, Nlri: nlri, Pattrs: attrs}, nil
}
