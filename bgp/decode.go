package bgp

import (
	"fmt"
	"net/netip"

	api "github.com/osrg/gobgp/v3/api"
	"google.golang.org/protobuf/encoding/protowire"
)

// The messages decodeBest reads out of a path's Any fields, by name.
var (
	nameIPPrefix = (&api.IPAddressPrefix{}).ProtoReflect().Descriptor().FullName()
	nameNextHop  = (&api.NextHopAttribute{}).ProtoReflect().Descriptor().FullName()
	nameMpReach  = (&api.MpReachNLRIAttribute{}).ProtoReflect().Descriptor().FullName()
)

// Field numbers of those messages (gobgp's api/attribute.proto).
const (
	fieldPrefixLen = 1 // IPAddressPrefix.prefix_len
	fieldPrefix    = 2 // IPAddressPrefix.prefix
	fieldNextHop   = 1 // NextHopAttribute.next_hop
	fieldNextHops  = 2 // MpReachNLRIAttribute.next_hops
)

// decodeBest turns a best-path event into a Learned entry. local reports a
// path this node originated; withdrawn a destination without a best path.
//
// It reads the few fields it needs straight from the Any values' bytes
// rather than unmarshalling whole messages: gobgp hands over every best
// path of a 10,000-route burst one at a time, and the messages it would
// build were garbage the moment they were read.
func decodeBest(p *api.Path) (l Learned, withdrawn, local bool, err error) {
	if l.Prefix, err = pathPrefix(p); err != nil {
		return l, false, false, err
	}
	if p.IsWithdraw {
		return l, true, false, nil
	}
	peer, perr := netip.ParseAddr(p.NeighborIp)
	if perr != nil || peer.IsUnspecified() {
		return l, false, true, nil
	}
	l.Peer = peer.Unmap()
	l.NextHop = pathNextHop(p)
	return l, false, false, nil
}

// pathPrefix is the destination of p's NLRI, an IPAddressPrefix.
func pathPrefix(p *api.Path) (netip.Prefix, error) {
	a := p.Nlri
	if a == nil || a.MessageName() != nameIPPrefix {
		return netip.Prefix{}, fmt.Errorf("decode NLRI: not an %s: %s", nameIPPrefix, a.GetTypeUrl())
	}
	var pfx string
	var bits uint64
	fs := fields{b: a.Value}
	for f, ok := fs.next(); ok; f, ok = fs.next() {
		switch {
		case f.num == fieldPrefixLen && f.typ == protowire.VarintType:
			bits = f.v
		case f.num == fieldPrefix && f.typ == protowire.BytesType:
			pfx = string(f.data)
		}
	}
	if fs.err != nil {
		return netip.Prefix{}, fmt.Errorf("decode NLRI: %w", fs.err)
	}
	addr, err := netip.ParseAddr(pfx)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("decode NLRI %q: %w", pfx, err)
	}
	return netip.PrefixFrom(addr.Unmap(), int(bits)).Masked(), nil
}

// pathNextHop is the next hop p's NEXT_HOP or MP_REACH_NLRI attribute
// names (the first of the latter's); invalid when it has none.
func pathNextHop(p *api.Path) netip.Addr {
	var nh netip.Addr
	for _, a := range p.Pattrs {
		var field protowire.Number
		switch a.MessageName() {
		case nameNextHop:
			field = fieldNextHop
		case nameMpReach:
			field = fieldNextHops
		default:
			continue
		}
		if s, ok := firstString(a.Value, field); ok {
			nh, _ = netip.ParseAddr(s)
		}
	}
	return nh.Unmap()
}

// firstString is the first value of the string field num in the message
// b, if it has one.
func firstString(b []byte, num protowire.Number) (string, bool) {
	fs := fields{b: b}
	for f, ok := fs.next(); ok; f, ok = fs.next() {
		if f.num == num && f.typ == protowire.BytesType {
			return string(f.data), true
		}
	}
	return "", false
}

// fields reads a message's fields in order.
type fields struct {
	b   []byte
	err error // why reading stopped early
}

// field is one field: a varint's value, or a length-delimited field's
// bytes.
type field struct {
	num  protowire.Number
	typ  protowire.Type
	v    uint64
	data []byte
}

func (fs *fields) next() (f field, ok bool) {
	if len(fs.b) == 0 || fs.err != nil {
		return f, false
	}
	var n int
	f.num, f.typ, n = protowire.ConsumeTag(fs.b)
	if n >= 0 {
		fs.b = fs.b[n:]
		switch f.typ {
		case protowire.VarintType:
			f.v, n = protowire.ConsumeVarint(fs.b)
		case protowire.BytesType:
			f.data, n = protowire.ConsumeBytes(fs.b)
		default:
			n = protowire.ConsumeFieldValue(f.num, f.typ, fs.b)
		}
	}
	if n < 0 {
		fs.err = protowire.ParseError(n)
		return f, false
	}
	fs.b = fs.b[n:]
	return f, true
}
