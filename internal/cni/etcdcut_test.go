package cni_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/projectcalico/calico-node/internal/ipam"
)

// etcdCutter is a gRPC proxy between the plugin and etcd that stops etcd
// at one chosen request: the failure-injection point of the "etcd goes
// away in the middle of an ADD" tests.
//
// Why a proxy and not a hook in the ipam client: the plugin under test is
// the real binary, executed by libcni in its own process, so a hook field
// set by the test could only reach it through an environment variable or
// flag read by production code. The proxy needs nothing of the sort, and
// it cuts where a real outage does, on the wire, so it also covers the
// case no in-process hook can: etcd applies a write and dies before its
// answer reaches the plugin. It understands just enough of etcd's API to
// recognise a request (every IPAM step is one KV.Txn); everything else,
// watches included, is passed through frame by frame.
//
// A cut is armed with arm and fires once, on the first request it
// matches: before (etcd stops, then the request goes on to the dead
// server, so the plugin sees what a vanished etcd gives it) or after the
// request reached etcd (etcd answers, stops, and the answer is replaced by
// a lost connection).
type etcdCutter struct {
	endpoint string // for the plugin's etcd_endpoints
	upstream *grpc.ClientConn
	srv      *grpc.Server

	mu  sync.Mutex
	cut *etcdCut
}

// etcdCut is one armed failure.
type etcdCut struct {
	step  string // names the step in messages
	match func(*etcdserverpb.TxnRequest) bool
	// after: let the request through and lose etcd's answer.
	after bool
	// stop is what happens at the cut: etcd stops (or, for a lost
	// answer on a healthy etcd, nothing).
	stop func()

	fired     chan struct{} // closed when the cut fired
	committed bool          // after-cuts: etcd applied the request
}

// newEtcdCutter starts a proxy in front of upstream (an http:// etcd
// endpoint) on a loopback port.
func newEtcdCutter(t testing.TB, upstream string) *etcdCutter {
	t.Helper()
	target, ok := strings.CutPrefix(upstream, "http://")
	if !ok {
		t.Fatalf("etcd cutter: plain http endpoint needed, got %s", upstream)
	}
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatalf("etcd cutter: dial %s: %v", upstream, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &etcdCutter{endpoint: "http://" + l.Addr().String(), upstream: conn}
	p.srv = grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(p.forward))
	go p.srv.Serve(l)
	t.Cleanup(func() {
		p.srv.Stop()
		conn.Close()
	})
	return p
}

// arm makes the next request that match accepts the cut. It returns the
// cut, whose fired channel tells whether it happened.
func (p *etcdCutter) arm(step string, after bool, match func(*etcdserverpb.TxnRequest) bool, stop func()) *etcdCut {
	c := &etcdCut{step: step, match: match, after: after, stop: stop, fired: make(chan struct{})}
	p.mu.Lock()
	p.cut = c
	p.mu.Unlock()
	return c
}

// take returns the armed cut if the request (the first frame of a call to
// method) is the one it waits for, disarming it.
func (p *etcdCutter) take(method string, frame []byte) *etcdCut {
	if method != "/etcdserverpb.KV/Txn" {
		return nil
	}
	var req etcdserverpb.TxnRequest
	if err := proto.Unmarshal(frame, &req); err != nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.cut
	if c == nil || !c.match(&req) {
		return nil
	}
	p.cut = nil
	return c
}

// forward relays one call of any method to etcd.
func (p *etcdCutter) forward(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	ctx := ss.Context()
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = metadata.NewOutgoingContext(ctx, md.Copy())
	}
	var first []byte
	if err := ss.RecvMsg(&first); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	cut := p.take(method, first)
	if cut != nil && !cut.after {
		cut.stop()
		close(cut.fired)
	}
	cs, err := p.upstream.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		return err
	}
	if err := cs.SendMsg(&first); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	// The rest of the client's frames (streams only; a unary call has
	// sent its one frame).
	go func() {
		for {
			var f []byte
			if err := ss.RecvMsg(&f); err != nil {
				cs.CloseSend()
				return
			}
			if err := cs.SendMsg(&f); err != nil {
				return
			}
		}
	}()
	if cut != nil && cut.after {
		var resp []byte
		err := cs.RecvMsg(&resp)
		var txn etcdserverpb.TxnResponse
		cut.committed = err == nil && proto.Unmarshal(resp, &txn) == nil && txn.Succeeded
		cut.stop()
		close(cut.fired)
		// What the plugin sees when the connection breaks under a call.
		return status.Error(codes.Unavailable, "transport is closing")
	}
	sentHeader := false
	for {
		var f []byte
		if err := cs.RecvMsg(&f); err != nil {
			ss.SetTrailer(cs.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if !sentHeader {
			if md, err := cs.Header(); err == nil {
				ss.SendHeader(md)
			}
			sentHeader = true
		}
		if err := ss.SendMsg(&f); err != nil {
			return err
		}
	}
}

// rawCodec passes gRPC frames through undecoded. It calls itself "proto"
// so that the content type on the wire stays etcd's.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

// Request matchers: which etcd transaction is which ADD step. Each IPAM
// step of this implementation is one transaction (see package ipam):
//
//	read     the IPAM config, the node's affinities and the handle
//	claim    block + confirmed affinity + allocation + handle, together
//	allocate block + handle, in a block the node already has
//	release  block + handle deletion (undo, DEL)
//
// and the endpoint is one conditional put.

// txnOps lists a transaction's operations, nested transactions' included.
func txnOps(ops []*etcdserverpb.RequestOp) []*etcdserverpb.RequestOp {
	var out []*etcdserverpb.RequestOp
	for _, op := range ops {
		out = append(out, op)
		if n := op.GetRequestTxn(); n != nil {
			out = append(out, txnOps(n.Success)...)
			out = append(out, txnOps(n.Failure)...)
		}
	}
	return out
}

// puts reports whether the transaction's success branch writes a key
// under each of the prefixes.
func puts(req *etcdserverpb.TxnRequest, prefixes ...string) bool {
	for _, prefix := range prefixes {
		found := false
		for _, op := range txnOps(req.Success) {
			if put := op.GetRequestPut(); put != nil && strings.HasPrefix(string(put.Key), prefix) {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

const (
	ipamBlockPrefix    = "/calico/ipam/v2/assignment/"
	ipamAffinityPrefix = "/calico/ipam/v2/host/"
	ipamHandlePrefix   = "/calico/ipam/v2/handle/"
	endpointPrefix     = "/calico/resources/v3/projectcalico.org/workloadendpoints/"
)

func isIPAMRead(req *etcdserverpb.TxnRequest) bool {
	for _, op := range req.Success {
		if r := op.GetRequestRange(); r != nil && string(r.Key) == "/calico/ipam/v2/config" {
			return true
		}
	}
	return false
}

func isBlockClaim(req *etcdserverpb.TxnRequest) bool {
	return puts(req, ipamBlockPrefix, ipamAffinityPrefix, ipamHandlePrefix)
}

func isAllocation(req *etcdserverpb.TxnRequest) bool {
	return puts(req, ipamBlockPrefix, ipamHandlePrefix) && !puts(req, ipamAffinityPrefix)
}

func isEndpointWrite(req *etcdserverpb.TxnRequest) bool { return puts(req, endpointPrefix) }

// leakedOf lists the addresses `ipam check` reports as leaked for handle
// (with node as the only live node).
func (e *env) leakedOf(handle string) []string {
	e.t.Helper()
	rep, err := e.ipam.Check(e.ctx, e.node)
	if err != nil {
		e.t.Fatalf("ipam check: %v", err)
	}
	var out []string
	for _, a := range rep.Leaked() {
		if a.Handle == handle {
			out = append(out, a.IP)
		}
	}
	return out
}

// checkClean fails unless `ipam check` finds nothing wrong at all.
func (e *env) checkClean(when string) *ipam.CheckReport {
	e.t.Helper()
	rep, err := e.ipam.Check(context.WithoutCancel(e.ctx), e.node)
	if err != nil {
		e.t.Fatalf("ipam check %s: %v", when, err)
	}
	if rep.Problems() != 0 {
		var leaked []string
		for _, a := range rep.Leaked() {
			leaked = append(leaked, a.IP+" ("+a.Handle+")")
		}
		e.t.Errorf("ipam check %s: %d problems; leaked %v, leaked handles %v, missing handles %v",
			when, rep.Problems(), leaked, rep.LeakedHandles, rep.MissingHandles)
	}
	return rep
}
