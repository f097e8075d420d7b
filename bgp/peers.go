package bgp

import (
	"crypto/sha256"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/model/selector"
)

// DefaultASNumber is the AS of nodes when neither the Node nor the default
// BGPConfiguration names one (Calico's global default).
const DefaultASNumber = 64512

// DefaultPort is the BGP port when no listenPort is configured.
const DefaultPort = 179

// DefaultRestartTime is the graceful-restart time announced to a peer when
// no maxRestartTime / nodeMeshMaxRestartTime is set (BIRD's default, which
// Calico relies on).
const DefaultRestartTime = 120 * time.Second

// PeerType says why a session exists, with the names `calicoctl node status`
// shows.
type PeerType string

const (
	PeerMesh   PeerType = "node-to-node mesh"
	PeerGlobal PeerType = "global"
	PeerNode   PeerType = "node specific"
)

// Session is one BGP session this node should have: the equivalent of one
// `protocol bgp` block in Calico's BIRD configuration.
type Session struct {
	// Name is BIRD's protocol name (Mesh_10_0_0_2, Global_..., Node_...),
	// kept so logs and status read like Calico's.
	Name     string
	Type     PeerType
	Addr     netip.Addr
	Port     uint16 // 0: DefaultPort
	PeerAS   uint32
	LocalAS  uint32 // the node's AS, or the BGPPeer's localASNumber
	Source   netip.Addr
	Passive  bool // wait for the peer to connect
	Password string
	// PasswordError is set when a password is configured but could not be
	// read; the session is still configured (without one) so that the
	// error shows in its status, as the peer will refuse us.
	PasswordError string
	RestartTime   time.Duration // 0: DefaultRestartTime
	// RRClient: this node reflects routes to the peer (it has a
	// routeReflectorClusterID and the peer is an iBGP peer outside that
	// cluster); ClusterID is then this node's cluster ID.
	RRClient    bool
	ClusterID   string
	NextHopKeep bool // eBGP: pass on the original next hop
	NextHopSelf bool
	TTLSecurity uint8 // hops; 0 = off
	// AllowLocalAS accepts routes whose AS path holds our AS this many times.
	AllowLocalAS uint32
	// PeerNode is the Calico node behind the address, if any.
	PeerNode string
}

// RemotePort returns the TCP port to connect to.
func (s Session) RemotePort() uint16 {
	if s.Port == 0 {
		return DefaultPort
	}
	return s.Port
}

// Restart returns the graceful-restart time to announce.
func (s Session) Restart() time.Duration {
	if s.RestartTime == 0 {
		return DefaultRestartTime
	}
	return s.RestartTime
}

// Identity is this node's BGP identity.
type Identity struct {
	Node       string
	IPv4, IPv6 netip.Addr   // invalid: that family is disabled
	Net4, Net6 netip.Prefix // the node's subnets (CrossSubnet, and never imported)
	AS         uint32
	RouterID   netip.Addr
	ListenPort uint16 // 0: DefaultPort
	ClusterID  string
	Labels     map[string]string
	// ListenOnNodeIP is BGPConfiguration bindMode NodeIP.
	ListenOnNodeIP bool
}

// Port returns the port to listen on.
func (id Identity) Port() uint16 {
	if id.ListenPort == 0 {
		return DefaultPort
	}
	return id.ListenPort
}

// Secrets resolves BGP passwords (secretKeyRef) to their values.
type Secrets interface {
	Secret(name, key string) (string, error)
}

// Snapshot is the input of the peer computation: the datastore as seen by
// this node.
type Snapshot struct {
	NodeName string
	Nodes    map[string]*api.Node
	Peers    map[string]*api.BGPPeer
	// BGPConfigs by name: "default" and "node.<nodename>".
	BGPConfigs map[string]*api.BGPConfiguration
	Secrets    Secrets // nil: passwords cannot be resolved
}

// Desired is the computed BGP configuration of this node.
type Desired struct {
	// OK is false when this node has no Node resource or no BGP address:
	// then it runs no BGP at all (Calico: "IPv4 disabled on this node").
	OK       bool
	Identity Identity
	Sessions []Session // sorted by Name
	// PeerFilters are the BGPFilters each session's BGPPeer names
	// (spec.filters, in order); mesh sessions have none.
	PeerFilters map[netip.Addr][]string
	// Problems are configuration errors worth a log line (unparsable
	// selectors or peer IPs, two sessions to one address).
	Problems []string
}

// nodeInfo is the BGP view of one Node, as confd's node processor turns it
// into /calico/bgp/v1/host/<node>/... keys.
type nodeInfo struct {
	name       string
	ip4, ip6   netip.Addr
	net4, net6 netip.Prefix
	as         uint32 // 0: use the global AS
	clusterID  string
	labels     map[string]string
	hasBGP     bool
}

// peering is one entry of Calico's v1 peer keys (/global/peer_v4/<ip>,
// /host/<node>/peer_v4/<ip>).
type peering struct {
	ip           netip.Addr
	port         uint16
	as           uint32
	localAS      uint32
	clusterID    string
	password     *string
	passwordErr  string
	useNodeIP    bool
	keepNextHop  bool
	nextHopMode  string
	restartTime  time.Duration
	calicoNode   bool
	peerNode     string
	ttlSecurity  uint8
	allowLocalAS uint32
	filters      []string // BGPFilter names, in the BGPPeer's order
}

type peeringKey struct {
	ip   netip.Addr
	port uint16
}

// Compute derives this node's BGP identity and sessions exactly as Calico's
// confd (client.go updatePeersV1 and the bird.cfg templates, v3.31) does:
// the BGPPeers become peerings (confd's v1 peer keys), which render, after
// the node-to-node mesh, into sessions in the order of the BIRD template.
func Compute(c Snapshot) Desired {
	k := newCluster(c)
	me := k.nodes[c.NodeName]
	if me == nil || !me.hasBGP || (!me.ip4.IsValid() && !me.ip6.IsValid()) {
		return Desired{}
	}
	id := k.identity(me)
	pf := map[netip.Addr][]string{}
	sessions := k.sessions(me, id, k.peerings(), pf)
	slices.SortFunc(sessions, func(a, b Session) int { return strings.Compare(a.Name, b.Name) })
	return Desired{OK: true, Identity: id, Sessions: sessions, PeerFilters: pf, Problems: k.problems}
}

// cluster is Compute's working state: the snapshot indexed once, and the
// problems found so far. It is pure and lives for one Compute.
type cluster struct {
	snap       Snapshot
	global     *api.BGPConfiguration // "default"; may be nil
	globalAS   uint32
	globalPort uint16
	nodes      map[string]*nodeInfo
	names      []string              // of nodes, sorted
	nodeIPs    map[netip.Addr]string // node address -> node name
	matches    map[string][]string   // selector -> matching node names
	problems   []string
}

func newCluster(c Snapshot) *cluster {
	k := &cluster{
		snap: c, global: c.BGPConfigs["default"], globalAS: DefaultASNumber,
		nodes: map[string]*nodeInfo{}, names: make([]string, 0, len(c.Nodes)),
		nodeIPs: map[netip.Addr]string{}, matches: map[string][]string{},
	}
	if k.global != nil {
		if k.global.Spec.ASNumber != nil {
			k.globalAS = uint32(*k.global.Spec.ASNumber)
		}
		k.globalPort = k.global.Spec.ListenPort
	}
	for name, n := range c.Nodes {
		k.nodes[name] = newNodeInfo(name, n)
		k.names = append(k.names, name)
	}
	slices.Sort(k.names)
	for _, name := range k.names {
		n := k.nodes[name]
		for _, a := range []netip.Addr{n.ip4, n.ip6} {
			if a.IsValid() {
				k.nodeIPs[a] = name
			}
		}
	}
	return k
}

func (k *cluster) problem(format string, args ...any) {
	k.problems = append(k.problems, fmt.Sprintf(format, args...))
}

// listenPort is node's BGP port: its node.<name> BGPConfiguration's, else
// the default one's; 0 for DefaultPort.
func (k *cluster) listenPort(node string) uint16 {
	if nc := k.snap.BGPConfigs["node."+node]; nc != nil && nc.Spec.ListenPort != 0 {
		return nc.Spec.ListenPort
	}
	return k.globalPort
}

func (k *cluster) nodeAS(n *nodeInfo) uint32 {
	if n.as != 0 {
		return n.as
	}
	return k.globalAS
}

func (k *cluster) identity(me *nodeInfo) Identity {
	id := Identity{
		Node: me.name, IPv4: me.ip4, IPv6: me.ip6, Net4: me.net4, Net6: me.net6,
		AS: k.nodeAS(me), ListenPort: k.listenPort(me.name), ClusterID: me.clusterID,
		Labels: me.labels, RouterID: me.ip4,
	}
	if k.global != nil && k.global.Spec.BindMode != nil && *k.global.Spec.BindMode == api.BindModeNodeIP {
		id.ListenOnNodeIP = true
	}
	if !me.ip4.IsValid() {
		// The router ID must be 4 octets even for IPv6-only nodes; Calico's
		// CALICO_ROUTER_ID=hash derives one from the node name.
		id.RouterID = hashRouterID(me.name)
	}
	return id
}

// nodesMatching lists the nodes sel selects, sorted; a selector that does
// not parse selects none and is reported once.
func (k *cluster) nodesMatching(sel string) []string {
	if m, ok := k.matches[sel]; ok {
		return m
	}
	s, err := selector.Parse(sel)
	if err != nil {
		k.problem("selector %q: %v", sel, err)
		k.matches[sel] = nil
		return nil
	}
	var out []string
	for _, name := range k.names {
		if s.Evaluate(k.nodes[name].labels) {
			out = append(out, name)
		}
	}
	k.matches[sel] = out
	return out
}

// nodesWithIPPortAndAS lists the nodes that a BGPPeer's peerIP and
// asNumber (0: the global AS) name; port 0 matches any port.
func (k *cluster) nodesWithIPPortAndAS(ip string, as api.ASNumber, port uint16) []string {
	want := k.globalAS
	if as != 0 {
		want = uint32(as)
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return nil
	}
	var out []string
	for _, name := range k.names {
		n := k.nodes[name]
		if n.ip4 != addr && n.ip6 != addr {
			continue
		}
		if k.nodeAS(n) != want {
			continue
		}
		if port != 0 {
			if p := k.listenPort(name); p != 0 && p != port {
				continue
			}
		}
		out = append(out, name)
	}
	return out
}

// secret resolves a BGPPeer's password: the value, or why it has none.
func (k *cluster) secret(bp *api.BGPPeer) (*string, string) {
	pw := bp.Spec.Password
	if pw == nil || pw.SecretKeyRef == nil {
		return nil, ""
	}
	if k.snap.Secrets == nil {
		return nil, fmt.Sprintf("password secret %s/%s: no secret source configured", pw.SecretKeyRef.Name, pw.SecretKeyRef.Key)
	}
	v, err := k.snap.Secrets.Secret(pw.SecretKeyRef.Name, pw.SecretKeyRef.Key)
	if err != nil {
		return nil, fmt.Sprintf("password secret %s/%s: %v", pw.SecretKeyRef.Name, pw.SecretKeyRef.Key, err)
	}
	return &v, ""
}

// setFields is Calico's setPeerConfigFieldsFromV3Resource.
func (k *cluster) setFields(ps []*peering, bp *api.BGPPeer) {
	pw, pwErr := k.secret(bp)
	for _, p := range ps {
		p.password, p.passwordErr = pw, pwErr
		p.filters = bp.Spec.Filters
		p.useNodeIP = bp.Spec.SourceAddress == "" || bp.Spec.SourceAddress == api.SourceAddressUseNodeIP
		if bp.Spec.MaxRestartTime != nil {
			p.restartTime = roundSeconds(bp.Spec.MaxRestartTime.Duration)
		}
	}
}

func nextHop(bp *api.BGPPeer) (keep bool, mode string) {
	if bp.Spec.NextHopMode != nil {
		return false, string(*bp.Spec.NextHopMode)
	}
	return bp.Spec.KeepOriginalNextHop, ""
}

// nodeAsPeers are the peerings with the Calico node name, in the families
// asked for, as bp configures them.
func (k *cluster) nodeAsPeers(name string, v4, v6 bool, bp *api.BGPPeer) []*peering {
	n := k.nodes[name]
	if n == nil {
		return nil
	}
	var out []*peering
	for _, fam := range []struct {
		want bool
		ip   netip.Addr
	}{{v4, n.ip4}, {v6, n.ip6}} {
		if !fam.want || !fam.ip.IsValid() {
			continue
		}
		keep, mode := nextHop(bp)
		p := &peering{
			ip: fam.ip, port: k.listenPort(name), as: k.nodeAS(n), clusterID: n.clusterID,
			keepNextHop: keep, nextHopMode: mode, peerNode: name,
		}
		if bp.Spec.TTLSecurity != nil {
			p.ttlSecurity = *bp.Spec.TTLSecurity
		}
		out = append(out, p)
	}
	return out
}

// peerIPPeering is the peering with the BGPPeer's peerIP; false (and a
// problem) when peerIP is no address.
func (k *cluster) peerIPPeering(name string, bp *api.BGPPeer) (*peering, bool) {
	host, port := parseIPPort(bp.Spec.PeerIP)
	ip, err := netip.ParseAddr(host)
	if err != nil {
		k.problem("BGPPeer %s: peerIP %q is not an IP address", name, bp.Spec.PeerIP)
		return nil, false
	}
	ip = ip.Unmap()
	if port == 0 {
		if ns := k.nodesWithIPPortAndAS(host, bp.Spec.ASNumber, 0); len(ns) > 0 {
			port = k.listenPort(ns[0])
		}
	}
	keep, mode := nextHop(bp)
	p := &peering{ip: ip, port: port, as: uint32(bp.Spec.ASNumber), keepNextHop: keep, nextHopMode: mode}
	if pn, ok := k.nodeIPs[ip]; ok {
		p.calicoNode, p.peerNode = true, pn
	}
	if bp.Spec.LocalASNumber != nil {
		p.localAS = uint32(*bp.Spec.LocalASNumber)
	}
	if bp.Spec.TTLSecurity != nil {
		p.ttlSecurity = *bp.Spec.TTLSecurity
	}
	if bp.Spec.NumAllowedLocalASNumbers != nil && *bp.Spec.NumAllowedLocalASNumbers > 0 {
		p.allowLocalAS = uint32(*bp.Spec.NumAllowedLocalASNumbers)
	}
	return p, true
}

// peerings are this node's v1 peer keys: the global ones, then the
// node-specific ones that no global one already has, each kept in the
// order first added (a later duplicate is dropped).
type peerings struct {
	global, node           map[peeringKey]*peering
	globalOrder, nodeOrder []peeringKey
}

func (pp *peerings) addGlobal(p *peering) {
	key := peeringKey{p.ip, p.port}
	if _, ok := pp.global[key]; ok {
		return
	}
	pp.global[key] = p
	pp.globalOrder = append(pp.globalOrder, key)
}

func (pp *peerings) addNode(p *peering) {
	key := peeringKey{p.ip, p.port}
	if _, ok := pp.node[key]; ok {
		return
	}
	if _, ok := pp.global[key]; ok {
		return
	}
	pp.node[key] = p
	pp.nodeOrder = append(pp.nodeOrder, key)
}

// peerings turns the BGPPeers into this node's peerings: forward ones
// (global BGPPeers first, so that node-specific ones duplicating them are
// skipped), then reverse ones.
func (k *cluster) peerings() *peerings {
	pp := &peerings{global: map[peeringKey]*peering{}, node: map[peeringKey]*peering{}}
	names := make([]string, 0, len(k.snap.Peers))
	for name := range k.snap.Peers {
		names = append(names, name)
	}
	// Calico walks a map here; a sorted walk makes the rare conflicts
	// (two BGPPeers producing the same peering) resolve the same way on
	// every node and every run.
	slices.Sort(names)
	for _, globalPass := range []bool{true, false} {
		for _, name := range names {
			k.forwardPeerings(pp, name, globalPass)
		}
	}
	for _, name := range names {
		k.reversePeerings(pp, name)
	}
	return pp
}

// forwardPeerings adds the peerings BGPPeer name gives this node on its
// local side: in the global pass if it is a global BGPPeer, else in the
// node-specific pass.
func (k *cluster) forwardPeerings(pp *peerings, name string, globalPass bool) {
	bp := k.snap.Peers[name]
	isGlobal := bp.Spec.NodeSelector == "" && bp.Spec.Node == ""
	if globalPass != isGlobal {
		return
	}
	if !isGlobal {
		var local []string
		if bp.Spec.NodeSelector != "" {
			local = k.nodesMatching(bp.Spec.NodeSelector)
		} else {
			local = []string{bp.Spec.Node}
		}
		if !slices.Contains(local, k.snap.NodeName) {
			return
		}
	}
	var ps []*peering
	switch {
	case bp.Spec.LocalWorkloadSelector != "":
		// Peering with local workloads is not supported.
		return
	case bp.Spec.PeerSelector != "":
		for _, pn := range k.nodesMatching(bp.Spec.PeerSelector) {
			ps = append(ps, k.nodeAsPeers(pn, true, true, bp)...)
		}
	default:
		p, ok := k.peerIPPeering(name, bp)
		if !ok {
			return
		}
		ps = append(ps, p)
	}
	k.setFields(ps, bp)
	for _, p := range ps {
		if globalPass {
			pp.addGlobal(p)
		} else {
			pp.addNode(p)
		}
	}
}

// reversePeerings adds the peerings of BGPPeer name in reverse: a node
// selected by its peer side peers back with the nodes on its local side,
// so sessions are symmetric.
func (k *cluster) reversePeerings(pp *peerings, name string) {
	bp := k.snap.Peers[name]
	if bp.Spec.ReversePeering != nil && *bp.Spec.ReversePeering == api.ReversePeeringManual {
		return
	}
	if bp.Spec.LocalWorkloadSelector != "" {
		return
	}
	var local []string
	var v4, v6 bool
	if bp.Spec.PeerSelector != "" {
		local = k.nodesMatching(bp.Spec.PeerSelector)
		v4, v6 = true, true
	} else {
		host, port := parseIPPort(bp.Spec.PeerIP)
		local = k.nodesWithIPPortAndAS(host, bp.Spec.ASNumber, port)
		if strings.Contains(host, ":") {
			v6 = true
		} else {
			v4 = true
		}
	}
	if !slices.Contains(local, k.snap.NodeName) {
		return
	}
	var peerNodes []string
	switch {
	case bp.Spec.NodeSelector != "":
		peerNodes = k.nodesMatching(bp.Spec.NodeSelector)
	case bp.Spec.Node != "":
		peerNodes = []string{bp.Spec.Node}
	default:
		peerNodes = k.nodesMatching("all()")
	}
	var ps []*peering
	for _, pn := range peerNodes {
		ps = append(ps, k.nodeAsPeers(pn, v4, v6, bp)...)
	}
	k.setFields(ps, bp)
	for _, p := range ps {
		pp.addNode(p)
	}
}

// meshSettings are what every mesh session shares: the default
// BGPConfiguration's nodeMeshPassword (or why it cannot be read) and
// nodeMeshMaxRestartTime.
func (k *cluster) meshSettings() Session {
	var s Session
	if k.global == nil {
		return s
	}
	if k.global.Spec.NodeMeshMaxRestartTime != nil {
		s.RestartTime = roundSeconds(k.global.Spec.NodeMeshMaxRestartTime.Duration)
	}
	if pw := k.global.Spec.NodeMeshPassword; pw != nil && pw.SecretKeyRef != nil {
		if k.snap.Secrets == nil {
			s.PasswordError = fmt.Sprintf("nodeMeshPassword secret %s/%s: no secret source configured", pw.SecretKeyRef.Name, pw.SecretKeyRef.Key)
		} else if v, err := k.snap.Secrets.Secret(pw.SecretKeyRef.Name, pw.SecretKeyRef.Key); err != nil {
			s.PasswordError = fmt.Sprintf("nodeMeshPassword secret %s/%s: %v", pw.SecretKeyRef.Name, pw.SecretKeyRef.Key, err)
		} else {
			s.Password = v
		}
	}
	return s
}

// sessions renders, for each of this node's families, in the order of
// the BIRD template: the mesh, the global peerings, the node-specific
// ones. A second session to one address is dropped as a problem.
func (k *cluster) sessions(me *nodeInfo, id Identity, pp *peerings, filters map[netip.Addr][]string) []Session {
	var out []Session
	byAddr := map[netip.Addr]string{}
	add := func(s Session) bool {
		if prev, ok := byAddr[s.Addr]; ok {
			k.problem("%s: a session to %s already exists (%s); ignored", s.Name, s.Addr, prev)
			return false
		}
		byAddr[s.Addr] = s.Name
		out = append(out, s)
		return true
	}
	mesh := k.meshSettings()
	meshEnabled := k.global == nil || k.global.Spec.NodeToNodeMeshEnabled == nil || *k.global.Spec.NodeToNodeMeshEnabled
	for _, myIP := range []netip.Addr{me.ip4, me.ip6} {
		if !myIP.IsValid() {
			continue
		}
		// A route reflector ignores the mesh setting: it only has the
		// sessions BGPPeers give it.
		if me.clusterID == "" && meshEnabled {
			for _, s := range k.meshSessions(myIP, id.AS, mesh) {
				add(s)
			}
		}
		for _, key := range pp.globalOrder {
			if s, ok := renderPeering(pp.global[key], PeerGlobal, "Global", myIP, id.AS, me.clusterID); ok {
				if add(s) && len(pp.global[key].filters) > 0 {
					filters[s.Addr] = pp.global[key].filters
				}
			}
		}
		for _, key := range pp.nodeOrder {
			if s, ok := renderPeering(pp.node[key], PeerNode, "Node", myIP, id.AS, me.clusterID); ok {
				if add(s) && len(pp.node[key].filters) > 0 {
					filters[s.Addr] = pp.node[key].filters
				}
			}
		}
	}
	return out
}

// meshSessions are the mesh sessions of the family of myIP: one to every
// other node with an address in it that is not a route reflector.
func (k *cluster) meshSessions(myIP netip.Addr, myAS uint32, shared Session) []Session {
	var out []Session
	for _, name := range k.names {
		n := k.nodes[name]
		ip := n.ip6
		if myIP.Is4() {
			ip = n.ip4
		}
		if !ip.IsValid() || ip == myIP || n.clusterID != "" {
			continue
		}
		s := shared
		s.Name, s.Type, s.Addr, s.Port = "Mesh_"+protoID(ip, 0), PeerMesh, ip, k.listenPort(name)
		s.PeerAS, s.LocalAS, s.Source, s.PeerNode = k.nodeAS(n), myAS, myIP, name
		// Calico makes the mesh one-directional (a node waits for peers
		// with a higher address to connect) so that a restarting node is
		// not raced by its peer's connection; the comparison is on the
		// address strings, as in the template, so mixed clusters agree on
		// who connects.
		s.Passive = ip.String() > myIP.String()
		out = append(out, s)
	}
	return out
}

// renderPeering is the session of peering p from myIP (of a node with AS
// myAS, in route reflector cluster myClusterID, "" if none); false when p
// is of the other family or is myIP itself.
func renderPeering(p *peering, typ PeerType, prefix string, myIP netip.Addr, myAS uint32, myClusterID string) (Session, bool) {
	if p.ip.Is4() != myIP.Is4() || p.ip == myIP {
		return Session{}, false
	}
	localAS := myAS
	if p.localAS != 0 {
		localAS = p.localAS
	}
	s := Session{
		Name: prefix + "_" + protoID(p.ip, p.port), Type: typ, Addr: p.ip, Port: p.port,
		PeerAS: p.as, LocalAS: localAS, RestartTime: p.restartTime,
		TTLSecurity: p.ttlSecurity, AllowLocalAS: p.allowLocalAS, PeerNode: p.peerNode,
		PasswordError: p.passwordErr,
	}
	if p.useNodeIP {
		s.Source = myIP
	}
	if typ == PeerGlobal && p.calicoNode && p.ip.String() > myIP.String() {
		s.Passive = true
	}
	if p.as == localAS && myClusterID != "" && p.clusterID != myClusterID {
		s.RRClient, s.ClusterID = true, myClusterID
	}
	if p.password != nil {
		s.Password = *p.password
	}
	if p.as != localAS && p.keepNextHop {
		s.NextHopKeep = true
	}
	switch p.nextHopMode {
	case string(api.NextHopModeSelf):
		s.NextHopSelf = true
	case string(api.NextHopModeKeep):
		s.NextHopKeep = true
	}
	return s, true
}

func newNodeInfo(name string, n *api.Node) *nodeInfo {
	ni := &nodeInfo{name: name, labels: n.Labels}
	b := n.Spec.BGP
	if b == nil {
		return ni
	}
	ni.hasBGP = true
	ni.ip4, ni.net4 = parseNodeAddr(b.IPv4Address, true)
	ni.ip6, ni.net6 = parseNodeAddr(b.IPv6Address, false)
	if b.ASNumber != nil {
		ni.as = uint32(*b.ASNumber)
	}
	ni.clusterID = b.RouteReflectorClusterID
	return ni
}

// parseNodeAddr reads "10.0.0.5/24" (or a bare address) into the address
// and its subnet.
func parseNodeAddr(s string, want4 bool) (netip.Addr, netip.Prefix) {
	if s == "" {
		return netip.Addr{}, netip.Prefix{}
	}
	var a netip.Addr
	var p netip.Prefix
	if strings.Contains(s, "/") {
		pp, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Addr{}, netip.Prefix{}
		}
		a, p = pp.Addr().Unmap(), netip.PrefixFrom(pp.Addr().Unmap(), pp.Bits()).Masked()
	} else {
		aa, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Addr{}, netip.Prefix{}
		}
		a = aa.Unmap()
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if a.Is4() != want4 {
		return netip.Addr{}, netip.Prefix{}
	}
	return a, p
}

// parseIPPort splits "ip", "ip:port" and "[ipv6]:port".
func parseIPPort(s string) (string, uint16) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return s, 0
	}
	p, err := strconv.ParseUint(port, 0, 16)
	if err != nil {
		return s, 0
	}
	return host, uint16(p)
}

// protoID is the address part of BIRD's protocol names: dots (or colons)
// become underscores, and a non-default port is appended.
func protoID(ip netip.Addr, port uint16) string {
	sep := "."
	if ip.Is6() {
		sep = ":"
	}
	id := strings.ReplaceAll(ip.String(), sep, "_")
	if port != 0 {
		id += "_port_" + strconv.Itoa(int(port))
	}
	return id
}

func roundSeconds(d time.Duration) time.Duration {
	return time.Duration(math.Round(d.Seconds())) * time.Second
}

// hashRouterID derives a router ID from the node name the way Calico's
// CALICO_ROUTER_ID=hash does: the first four bytes of SHA-256, moved out of
// the multicast/reserved range.
func hashRouterID(node string) netip.Addr {
	h := sha256.Sum256([]byte(node))
	b := [4]byte{h[0], h[1], h[2], h[3]}
	if b[0] > 223 {
		b[0] -= 32
	}
	return netip.AddrFrom4(b)
}

// SecretsDir reads BGP passwords from files <dir>/<secret name>/<key>: the
// layout a Kubernetes Secret mounted as a volume has. Calico reads the
// Secret through the Kubernetes API; with an etcd datastore and no API
// server, a mounted (or hand-made) directory is what is there.
type SecretsDir string

// Secret returns the content of the file, exactly.
func (d SecretsDir) Secret(name, key string) (string, error) {
	for _, part := range []string{name, key} {
		if part == "" || part == "." || part == ".." || strings.ContainsAny(part, `/\`) {
			return "", fmt.Errorf("invalid secret reference %q/%q", name, key)
		}
	}
	b, err := os.ReadFile(filepath.Join(string(d), name, key))
	if err != nil {
		return "", fmt.Errorf("read secret: %w", err)
	}
	return string(b), nil
}
