package bgp

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/ipamkv"
)

// attrNode is the allocation attribute naming the node an address was
// assigned on (Calico's IPAM "node" secondary attribute).
const attrNode = "node"

// IPAMStore is where the IPAM keys are watched: a datastore.Store's IPAM().
type IPAMStore interface {
	Watch(ctx context.Context, prefix string) <-chan datastore.KVEvent
}

// ipamWatch follows this node's block affinities and the allocations its
// workloads hold in other nodes' blocks.
//
// Design: one KV watch of the IPAM prefix, which starts (and restarts after
// any failure) with a Reset of everything. The state is owned by the Run
// goroutine; every batch of changes hands a complete IPAMState to publish.
type ipamWatch struct {
	kv      IPAMStore
	node    string
	log     *slog.Logger
	publish func(IPAMState)

	affinities map[netip.Prefix]bool   // own blocks, affinity not pending
	borrowed   map[string][]netip.Addr // block key -> our addresses in it
	synced     bool
	last       *IPAMState // last published
}

func newIPAMWatch(kv IPAMStore, node string, logger *slog.Logger, publish func(IPAMState)) *ipamWatch {
	return &ipamWatch{kv: kv, node: node, log: logger, publish: publish,
		affinities: map[netip.Prefix]bool{}, borrowed: map[string][]netip.Addr{}}
}

// Run watches until ctx ends.
func (w *ipamWatch) Run(ctx context.Context) {
	events := w.kv.Watch(ctx, ipamkv.Prefix)
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			changed := w.handle(ev)
			// Fold everything already queued into one state.
			for more := true; more; {
				select {
				case ev, ok := <-events:
					if !ok {
						return
					}
					changed = w.handle(ev) || changed
				default:
					more = false
				}
			}
			if changed && w.synced {
				w.emit()
			}
		}
	}
}

// handle folds one event into the state and reports whether it mattered.
func (w *ipamWatch) handle(ev datastore.KVEvent) bool {
	switch ev.Type {
	case datastore.KVReset:
		clear(w.affinities)
		clear(w.borrowed)
		for _, kv := range ev.Snapshot {
			w.apply(kv.Key, kv.Value, false)
		}
		w.synced = true
		return true
	case datastore.KVPut:
		return w.apply(ev.KV.Key, ev.KV.Value, false)
	case datastore.KVDelete:
		return w.apply(ev.KV.Key, nil, true)
	}
	if ev.Err != nil {
		w.log.Warn("IPAM watch failed; relisting", "err", ev.Err)
	}
	return false
}

// apply folds one key into the state and reports whether it mattered.
func (w *ipamWatch) apply(key string, value []byte, deleted bool) bool {
	switch {
	case strings.HasPrefix(key, ipamkv.AffinityHostPrefix(ipamkv.AffinityHost, w.node)):
		typ, host, cidr, ok := ipamkv.ParseAffinityKey(key)
		if !ok || typ != ipamkv.AffinityHost || host != w.node {
			return false
		}
		confirmed := false
		if !deleted {
			var v ipamkv.Affinity
			if err := json.Unmarshal(value, &v); err != nil {
				w.log.Warn("undecodable block affinity", "key", key, "err", err)
				return false
			}
			// A pending affinity is a claim in progress: Calico's confd ignores
			// it. "confirmed", "" (older Calico) and "pendingDeletion" (still
			// exported by BIRD until the affinity goes) count.
			confirmed = v.State != ipamkv.StatePending
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
	case strings.HasPrefix(key, ipamkv.BlockPrefix):
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

// borrowedIn returns the addresses of a block (as Calico stores it) that
// are allocated to node while the block is not affine to node.
func borrowedIn(value []byte, node string) ([]netip.Addr, error) {
	var b ipamkv.Block
	if err := json.Unmarshal(value, &b); err != nil {
		return nil, err
	}
	b.UpgradeAffinity()
	if b.Affinity != nil && *b.Affinity == ipamkv.HostAffinityPrefix+node {
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
