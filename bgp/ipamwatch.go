package bgp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// IPAM keys (Calico's libcalico-go model, v3.31). The ipam package keeps
// its key parsing and block model unexported, so the little this package
// needs is parsed here.
const (
	ipamPrefix       = "/calico/ipam/v2/"
	ipamHostPrefix   = ipamPrefix + "host/"
	ipamBlockPrefix  = ipamPrefix + "assignment/"
	affinityPending  = "pending"
	hostAffinityTag  = "host:"
	attrNode         = "node"
	ipamRetryBackoff = 5 * time.Second
)

// Etcd is the part of the etcd client the IPAM watch uses: one list,
// then a watch; *clientv3.Client implements it.
type Etcd interface {
	Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error)
	Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan
}

// ipamWatch follows this node's block affinities and the allocations its
// workloads hold in other nodes' blocks.
//
// Design: one Get of the IPAM prefix, then one watch of it from the next
// revision; a compacted revision (or any watch failure) starts over with a
// fresh Get. The state is owned by the Run goroutine; every change hands a
// complete IPAMState to publish.
type ipamWatch struct {
	kv      Etcd
	node    string
	log     *slog.Logger
	publish func(IPAMState)

	affinities map[netip.Prefix]bool   // own blocks, affinity not pending
	borrowed   map[string][]netip.Addr // block key -> our addresses in it
	last       *IPAMState              // last published
}

func newIPAMWatch(kv Etcd, node string, logger *slog.Logger, publish func(IPAMState)) *ipamWatch {
	return &ipamWatch{kv: kv, node: node, log: logger, publish: publish}
}

// Run lists and watches until ctx ends.
func (w *ipamWatch) Run(ctx context.Context) {
	for ctx.Err() == nil {
		err := w.listAndWatch(ctx)
		if ctx.Err() != nil {
			return
		}
		w.log.Warn("IPAM watch failed; relisting", "err", err, "backoff", ipamRetryBackoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(ipamRetryBackoff):
		}
	}
}

func (w *ipamWatch) listAndWatch(ctx context.Context) error {
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	resp, err := w.kv.Get(lctx, ipamPrefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return fmt.Errorf("list %s: %w", ipamPrefix, err)
	}
	w.affinities = map[netip.Prefix]bool{}
	w.borrowed = map[string][]netip.Addr{}
	for _, kv := range resp.Kvs {
		w.apply(string(kv.Key), kv.Value, false)
	}
	w.emit()
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	ch := w.kv.Watch(wctx, ipamPrefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	for wr := range ch {
		if err := wr.Err(); err != nil {
			if errors.Is(err, rpctypes.ErrCompacted) {
				return fmt.Errorf("watch %s: revision compacted: %w", ipamPrefix, err)
			}
			return fmt.Errorf("watch %s: %w", ipamPrefix, err)
		}
		changed := false
		for _, ev := range wr.Events {
			if w.apply(string(ev.Kv.Key), ev.Kv.Value, ev.Type == mvccpb.DELETE) {
				changed = true
			}
		}
		if changed {
			w.emit()
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return errors.New("watch channel closed")
}

// apply folds one key into the state and reports whether it mattered.
func (w *ipamWatch) apply(key string, value []byte, deleted bool) bool {
	switch {
	case strings.HasPrefix(key, ipamHostPrefix+w.node+"/"):
		cidr, ok := affinityCIDR(strings.TrimPrefix(key, ipamHostPrefix+w.node+"/"))
		if !ok {
			return false
		}
		confirmed := false
		if !deleted {
			var v struct {
				State string `json:"state"`
			}
			if err := json.Unmarshal(value, &v); err != nil {
				w.log.Warn("undecodable block affinity", "key", key, "err", err)
				return false
			}
			// A pending affinity is a claim in progress: Calico's confd ignores
			// it. "confirmed", "" (older Calico) and "pendingDeletion" (still
			// exported by BIRD until the affinity goes) count.
			confirmed = v.State != affinityPending
		}
		if w.affinities[cidr] == confirmed {
			return false
		}
		if confirmed {
			w.affinities[cidr] = true
		} else {
			delete(w.affinities, cidr)
		}
		return true
	case strings.HasPrefix(key, ipamBlockPrefix):
		var addrs []netip.Addr
		if !deleted {
			var err error
			if addrs, err = borrowedIn(value, w.node); err != nil {
				w.log.Warn("undecodable IPAM block", "key", key, "err", err)
				return false
			}
		}
		old := w.borrowed[key]
		if slices.Equal(old, addrs) {
			return false
		}
		if len(addrs) == 0 {
			delete(w.borrowed, key)
		} else {
			w.borrowed[key] = addrs
		}
		return true
	}
	return false
}

func (w *ipamWatch) emit() {
	var st IPAMState
	for p := range w.affinities {
		st.Blocks = append(st.Blocks, p)
	}
	for _, as := range w.borrowed {
		st.Borrowed = append(st.Borrowed, as...)
	}
	slices.SortFunc(st.Blocks, comparePrefix)
	slices.SortFunc(st.Borrowed, func(a, b netip.Addr) int { return a.Compare(b) })
	st.Borrowed = slices.Compact(st.Borrowed)
	if w.last != nil && slices.Equal(w.last.Blocks, st.Blocks) && slices.Equal(w.last.Borrowed, st.Borrowed) {
		return
	}
	w.last = &st
	w.publish(st)
}

// affinityCIDR parses the tail "ipv4/block/10.0.0.0-26" of an affinity key.
func affinityCIDR(tail string) (netip.Prefix, bool) {
	parts := strings.Split(tail, "/")
	if len(parts) != 3 || parts[1] != "block" || (parts[0] != "ipv4" && parts[0] != "ipv6") {
		return netip.Prefix{}, false
	}
	i := strings.LastIndex(parts[2], "-")
	if i < 0 {
		return netip.Prefix{}, false
	}
	p, err := netip.ParsePrefix(parts[2][:i] + "/" + parts[2][i+1:])
	if err != nil {
		return netip.Prefix{}, false
	}
	return p.Masked(), true
}

// borrowedIn returns the addresses of a block (as Calico stores it) that
// are allocated to node while the block is not affine to node.
func borrowedIn(value []byte, node string) ([]netip.Addr, error) {
	var b struct {
		CIDR         string  `json:"cidr"`
		Affinity     *string `json:"affinity"`
		HostAffinity *string `json:"hostAffinity"`
		Allocations  []*int  `json:"allocations"`
		Attributes   []struct {
			Secondary map[string]string `json:"secondary"`
		} `json:"attributes"`
	}
	if err := json.Unmarshal(value, &b); err != nil {
		return nil, err
	}
	aff := b.Affinity
	if aff == nil && b.HostAffinity != nil {
		h := hostAffinityTag + *b.HostAffinity
		aff = &h
	}
	if aff != nil && *aff == hostAffinityTag+node {
		return nil, nil
	}
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return nil, fmt.Errorf("block cidr %q: %w", b.CIDR, err)
	}
	var out []netip.Addr
	base := cidr.Masked().Addr()
	for ord, idx := range b.Allocations {
		if idx == nil || *idx < 0 || *idx >= len(b.Attributes) {
			continue
		}
		if b.Attributes[*idx].Secondary[attrNode] != node {
			continue
		}
		out = append(out, addOffset(base, uint64(ord)))
	}
	return out, nil
}

// addOffset returns a + n.
func addOffset(a netip.Addr, n uint64) netip.Addr {
	b := a.As16()
	carry := n
	for i := 15; i >= 0 && carry > 0; i-- {
		sum := uint64(b[i]) + carry&0xff
		b[i] = byte(sum)
		carry = carry>>8 + sum>>8
	}
	out := netip.AddrFrom16(b)
	if a.Is4() {
		return out.Unmap()
	}
	return out
}
