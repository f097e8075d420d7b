package routetable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Op is one route write: a replace, or a delete when Del is set.
type Op struct {
	Del   bool
	Route *netlink.Route
}

// batchWriter is a Kernel that writes many routes per system call. The
// table uses it when its Kernel has it, and writes one route per request
// otherwise.
type batchWriter interface {
	// WriteRoutes applies ops in order and returns, for each, the
	// kernel's error or nil.
	WriteRoutes(ops []Op) []error
}

// Netlink is the table's Kernel for a real network namespace: a
// *netlink.Handle for reads and single writes, plus a socket of its own
// for batched writes.
//
// netlink.Handle.RouteReplace sends one RTM_NEWROUTE and waits for its
// acknowledgement: installing 10,000 routes costs 10,000 round trips.
// WriteRoutes instead packs up to batchSize messages into one sendmsg
// (the kernel's netlink_rcv_skb processes every message of a buffer in
// order), asks for an acknowledgement only on the last one, and reads
// the answers once: the kernel answers a failed message with its error
// whether or not it was asked to, so every error still arrives, tagged
// with its message's sequence number, before the last acknowledgement.
type Netlink struct {
	*netlink.Handle
	sock *nl.NetlinkSocket
	seq  uint32
}

const (
	batchSize = 256
	// Errors echo no request (NETLINK_CAP_ACK), but a batch of failures
	// still needs room: 4 MiB holds thousands of them.
	batchRcvBuf  = 4 << 20
	batchTimeout = 10 * time.Second
)

// NewNetlink opens a Kernel in network namespace ns (netns.None(): the
// caller's).
func NewNetlink(ns netns.NsHandle) (*Netlink, error) {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("open netlink handle: %w", err)
	}
	s, err := nl.GetNetlinkSocketAt(ns, netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("open netlink socket for route batches: %w", err)
	}
	// Best effort: without them, errors are still reported, only bigger.
	_ = s.SetReceiveBufferSize(batchRcvBuf, true)
	_ = unix.SetsockoptInt(s.GetFd(), unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	tv := unix.NsecToTimeval(batchTimeout.Nanoseconds())
	_ = s.SetReceiveTimeout(&tv)
	return &Netlink{Handle: h, sock: s}, nil
}

// Close closes both sockets.
func (n *Netlink) Close() {
	n.sock.Close()
	n.Handle.Close()
}

// WriteRoutes writes ops in batches; see Netlink. Not safe for
// concurrent use (the table's Run goroutine is its only caller).
func (n *Netlink) WriteRoutes(ops []Op) []error {
	errs := make([]error, len(ops))
	for start := 0; start < len(ops); start += batchSize {
		end := min(start+batchSize, len(ops))
		n.writeBatch(ops[start:end], errs[start:end])
	}
	return errs
}

func (n *Netlink) writeBatch(ops []Op, errs []error) {
	var buf []byte
	if n.seq > 1<<31 {
		n.seq = 0 // a batch's numbers must not wrap: answers are told by range
	}
	first, lastAt := n.seq+1, -1
	for i, op := range ops {
		n.seq++
		msg, err := encodeRoute(op, n.seq)
		if err != nil {
			errs[i] = err
			continue
		}
		lastAt = len(buf)
		buf = append(buf, msg...)
	}
	if lastAt < 0 {
		return
	}
	// Only the last message asks for an acknowledgement: it ends the read.
	flags := binary.NativeEndian.Uint16(buf[lastAt+6:])
	binary.NativeEndian.PutUint16(buf[lastAt+6:], flags|unix.NLM_F_ACK)
	last := binary.NativeEndian.Uint32(buf[lastAt+8:])
	fail := func(err error) {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
	}
	deadline := time.Now().Add(batchTimeout)
	for {
		err := unix.Sendto(n.sock.GetFd(), buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN && time.Now().Before(deadline) {
			// The socket is non-blocking; the kernel rarely pushes back.
			time.Sleep(time.Millisecond)
			continue
		}
		if err != nil {
			fail(fmt.Errorf("send route batch: %w", err))
			return
		}
		break
	}
	for {
		msgs, _, err := n.sock.Receive()
		if err != nil {
			// Lost answers (a timeout, ENOBUFS): report every route of
			// the batch as not known to be written; the table retries.
			fail(fmt.Errorf("read route batch answers: %w", err))
			return
		}
		for _, m := range msgs {
			seq := m.Header.Seq
			if m.Header.Type != unix.NLMSG_ERROR || seq < first || seq > last {
				continue // an answer to an earlier batch that timed out
			}
			if len(m.Data) < 4 {
				continue
			}
			code := int32(binary.NativeEndian.Uint32(m.Data[:4]))
			if i := int(seq - first); code != 0 && i < len(ops) {
				errs[i] = syscall.Errno(-code)
			}
			if seq == last {
				return
			}
		}
	}
}

// encodeRoute is op as one netlink message: the attributes the table
// writes (netlink.Handle.RouteReplace's encoding of the same fields).
func encodeRoute(op Op, seq uint32) ([]byte, error) {
	r := op.Route
	if r == nil || r.Dst == nil {
		return nil, errors.New("encode route: no destination")
	}
	typ, fl := unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_REPLACE
	if op.Del {
		typ, fl = unix.RTM_DELROUTE, 0
	}
	req := nl.NetlinkRequest{NlMsghdr: unix.NlMsghdr{Type: uint16(typ), Flags: uint16(unix.NLM_F_REQUEST | fl), Seq: seq}}
	msg := nl.NewRtMsg()
	if op.Del {
		msg = nl.NewRtDelMsg()
	}
	dst := r.Dst.IP.To4()
	msg.Family = unix.AF_INET
	if dst == nil {
		dst = r.Dst.IP.To16()
		msg.Family = unix.AF_INET6
	}
	if dst == nil {
		return nil, fmt.Errorf("encode route %s: bad address", r.Dst)
	}
	ones, _ := r.Dst.Mask.Size()
	msg.Dst_len = uint8(ones)
	msg.Protocol = uint8(r.Protocol)
	if !op.Del || r.Scope != 0 {
		msg.Scope = uint8(r.Scope)
	}
	if r.Type != 0 {
		msg.Type = uint8(r.Type)
	}
	msg.Flags = uint32(r.Flags)
	msg.Table = unix.RT_TABLE_MAIN
	if r.Table > 0 {
		if r.Table >= 256 {
			msg.Table = unix.RT_TABLE_UNSPEC
		} else {
			msg.Table = uint8(r.Table)
		}
	}
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.RTA_DST, dst))
	if r.Table >= 256 {
		req.AddData(nl.NewRtAttr(unix.RTA_TABLE, nl.Uint32Attr(uint32(r.Table))))
	}
	if r.Gw != nil {
		gw := r.Gw.To4()
		if (gw == nil) != (msg.Family == unix.AF_INET6) {
			return nil, fmt.Errorf("encode route %s: gateway %s of another family", r.Dst, r.Gw)
		}
		if gw == nil {
			gw = r.Gw.To16()
		}
		req.AddData(nl.NewRtAttr(unix.RTA_GATEWAY, gw))
	}
	if r.Src != nil {
		src := r.Src.To4()
		if src == nil {
			src = r.Src.To16()
		}
		req.AddData(nl.NewRtAttr(unix.RTA_PREFSRC, src))
	}
	if r.Priority > 0 {
		req.AddData(nl.NewRtAttr(unix.RTA_PRIORITY, nl.Uint32Attr(uint32(r.Priority))))
	}
	if r.LinkIndex > 0 {
		req.AddData(nl.NewRtAttr(unix.RTA_OIF, nl.Uint32Attr(uint32(r.LinkIndex))))
	}
	return req.Serialize(), nil
}

// writeReporting writes ops, keys[i] naming ops[i]'s route, and returns
// the errors of the pass: a delete of a route already gone is none; a
// refused replace is also recorded in problems under its key.
func (t *Table) writeReporting(ops []Op, keys []routeKey, problems map[routeKey]string) []error {
	var errs []error
	for i, err := range t.write(ops) {
		switch {
		case err == nil:
		case ops[i].Del:
			if !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("delete route %s: %w", ops[i].Route.Dst, err))
			}
		default:
			errs = append(errs, fmt.Errorf("replace route %s: %w", ops[i].Route.Dst, err))
			problems[keys[i]] = "the kernel refused it: " + err.Error()
		}
	}
	return errs
}

// write applies ops through the kernel's batches when it has them.
func (t *Table) write(ops []Op) []error {
	if b, ok := t.k.(batchWriter); ok {
		return b.WriteRoutes(ops)
	}
	errs := make([]error, len(ops))
	for i, op := range ops {
		if op.Del {
			errs[i] = t.k.RouteDel(op.Route)
		} else {
			errs[i] = t.k.RouteReplace(op.Route)
		}
	}
	return errs
}
