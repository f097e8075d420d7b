// Package startup is calico-node's one-shot node initialisation, run before
// the long-lived actors start: it registers this node's Node resource with
// its autodetected addresses, makes sure the cluster-wide defaults exist
// (ClusterInformation, the built-in tiers, default IP pools) and writes the
// nodename file the CNI plugin reads.
//
// Design: every write is create-if-missing or a compare-and-swap update
// retried on conflict, so many nodes starting at once converge without
// clobbering each other. Address detection goes through autodetect.Source,
// the only kernel access here.
//
// Thread safety: Run is a plain function; it shares nothing.
package startup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/projectcalico/calico-node/internal/atomicfile"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/node/autodetect"
)

// Special values of the IP / IP6 settings, as calico-node's.
const (
	AddrAutodetect = "autodetect"
	AddrNone       = "none"
)

// PoolConfig describes a default pool created when a family has none.
type PoolConfig struct {
	CIDR         string
	BlockSize    int // 0 = the kind's default
	IPIPMode     string
	VXLANMode    string
	NATOutgoing  bool
	NodeSelector string
}

// Config is what calico-node's environment says about this node.
type Config struct {
	NodeName       string
	IP             string // "", "autodetect", "none" or an address (optionally with prefix)
	IP6            string
	IPMethod       string // IP_AUTODETECTION_METHOD
	IP6Method      string
	ASNumber       string // AS; empty = inherit the BGPConfiguration's
	IPv4Pool       PoolConfig
	IPv6Pool       PoolConfig // created only when CIDR is set
	NoDefaultPools bool
	ClusterType    string // CLUSTER_TYPE, recorded in ClusterInformation
	// K8sNodeRef is the node's Kubernetes name (CALICO_K8S_NODE_REF),
	// recorded as the Node's "k8s" orchRef; "" leaves orchRefs alone.
	K8sNodeRef   string
	Version      string
	NodenameFile string // e.g. /var/lib/calico/nodename; "" = don't write
}

// Store is the part of the datastore startup needs.
type Store interface {
	Get(ctx context.Context, kind, namespace, name string) (api.Object, error)
	List(ctx context.Context, kind, namespace string) ([]api.Object, int64, error)
	Create(ctx context.Context, obj api.Object) (api.Object, error)
	Update(ctx context.Context, obj api.Object) (api.Object, error)
}

// Run initialises the node and returns its registered Node resource.
func Run(ctx context.Context, store Store, src autodetect.Source, cfg Config, log *slog.Logger) (*api.Node, error) {
	log = log.With("component", "startup", "node", cfg.NodeName)
	if cfg.NodeName == "" {
		return nil, errors.New("node name is empty: set NODENAME or --nodename")
	}
	if err := ensureClusterInformation(ctx, store, cfg, log); err != nil {
		return nil, err
	}
	if err := ensureTiers(ctx, store); err != nil {
		return nil, err
	}
	node, err := registerNode(ctx, store, src, cfg, log)
	if err != nil {
		return nil, err
	}
	if !cfg.NoDefaultPools {
		if err := ensureDefaultPools(ctx, store, cfg, log); err != nil {
			return nil, err
		}
	}
	if cfg.NodenameFile != "" {
		if err := writeFileAtomic(cfg.NodenameFile, []byte(cfg.NodeName)); err != nil {
			return nil, fmt.Errorf("write nodename file: %w", err)
		}
	}
	return node, nil
}

// NodeName applies calico-node's precedence: explicit value, HOSTNAME, then
// the kernel's hostname, lower-cased and trimmed.
func NodeName(explicit string, getenv func(string) string) (string, error) {
	n := explicit
	if n == "" {
		n = getenv("HOSTNAME")
	}
	if n == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("determine node name: %w", err)
		}
		n = h
	}
	return strings.ToLower(strings.TrimSpace(n)), nil
}

// nodeWaitInterval is how often start-up looks for a Kubernetes Node that
// does not exist yet.
const nodeWaitInterval = 2 * time.Second

func registerNode(ctx context.Context, store Store, src autodetect.Source, cfg Config, log *slog.Logger) (*api.Node, error) {
	for attempt := 0; ; attempt++ {
		var node *api.Node
		obj, err := store.Get(ctx, "Node", "", cfg.NodeName)
		switch {
		case err == nil:
			node = obj.(*api.Node)
		case errors.Is(err, datastore.ErrNotFound):
			node = &api.Node{}
			node.Kind, node.APIVersion = "Node", api.GroupVersion
			node.Name = cfg.NodeName
		default:
			return nil, fmt.Errorf("read node %s: %w", cfg.NodeName, err)
		}
		if err := configureAddresses(node, src, cfg, log); err != nil {
			return nil, err
		}
		if cfg.K8sNodeRef != "" {
			// As Calico does: the reference replaces any others.
			node.Spec.OrchRefs = []api.OrchRef{{NodeName: cfg.K8sNodeRef, Orchestrator: api.OrchestratorKubernetes}}
		}
		if err := checkConflicts(ctx, store, node); err != nil {
			return nil, err
		}
		var saved api.Object
		if node.ResourceVersion == "" {
			saved, err = store.Create(ctx, node)
		} else {
			saved, err = store.Update(ctx, node)
		}
		switch {
		case err == nil:
			n := saved.(*api.Node)
			log.Info("node registered", "ipv4", bgpField(n, 4), "ipv6", bgpField(n, 6))
			return n, nil
		case (errors.Is(err, datastore.ErrConflict) || errors.Is(err, datastore.ErrAlreadyExists)) && attempt < 10:
			continue // someone else wrote the node meanwhile: re-read and retry
		case errors.Is(err, datastore.ErrNotSupported) && node.ResourceVersion == "":
			// The Kubernetes datastore keeps a Calico Node on the
			// Kubernetes Node, which only kubelet creates: wait for it, as
			// a calico-node pod can start before its kubelet registers.
			log.Warn("waiting for the Kubernetes Node to be registered (by kubelet)", "node", cfg.NodeName, "err", err)
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("register node %s: %w", cfg.NodeName, ctx.Err())
			case <-time.After(nodeWaitInterval):
			}
			attempt = 0
			continue
		default:
			return nil, fmt.Errorf("register node %s: %w", cfg.NodeName, err)
		}
	}
}

func bgpField(n *api.Node, family int) string {
	if n.Spec.BGP == nil {
		return ""
	}
	if family == 4 {
		return n.Spec.BGP.IPv4Address
	}
	return n.Spec.BGP.IPv6Address
}

// configureAddresses sets spec.bgp addresses and AS number on node.
func configureAddresses(node *api.Node, src autodetect.Source, cfg Config, log *slog.Logger) error {
	v4, err := chooseAddress(4, cfg.IP, cfg.IPMethod, bgpField(node, 4), src)
	if err != nil {
		return err
	}
	v6, err := chooseAddress(6, orDefault(cfg.IP6, AddrNone), cfg.IP6Method, bgpField(node, 6), src)
	if err != nil {
		return err
	}
	if v4 == "" && v6 == "" && cfg.ASNumber == "" && node.Spec.BGP == nil {
		log.Warn("node has no IPv4 or IPv6 address: BGP will not run on it")
		return nil
	}
	if node.Spec.BGP == nil {
		node.Spec.BGP = &api.NodeBGPSpec{}
	}
	node.Spec.BGP.IPv4Address = v4
	node.Spec.BGP.IPv6Address = v6
	if cfg.ASNumber != "" {
		asn, err := api.ASNumberFromString(cfg.ASNumber)
		if err != nil {
			return fmt.Errorf("AS %q: %w", cfg.ASNumber, err)
		}
		node.Spec.BGP.ASNumber = &asn
	}
	return nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// chooseAddress implements calico-node's IP/IP6 rules: "none" clears the
// address, an explicit address is used as given, "autodetect" always
// detects, and empty keeps the Node's current address or detects one.
func chooseAddress(family int, setting, method, current string, src autodetect.Source) (string, error) {
	env := "IP"
	if family == 6 {
		env = "IP6"
	}
	switch strings.ToLower(setting) {
	case AddrNone:
		return "", nil
	case "":
		if current != "" {
			return current, nil
		}
	case AddrAutodetect:
	default:
		p, err := autodetect.Validate(setting)
		if err != nil {
			return "", fmt.Errorf("%s=%q: %w", env, setting, err)
		}
		if (family == 4) != p.Addr().Is4() {
			return "", fmt.Errorf("%s=%q is not an IPv%d address", env, setting, family)
		}
		// A bare address takes its prefix length from the host interface
		// that has it, as calico-node does.
		p, _, err = autodetect.Resolve(setting, family, src)
		if err != nil {
			return "", fmt.Errorf("%s=%q: %w", env, setting, err)
		}
		return p.String(), nil
	}
	m, err := autodetect.ParseMethod(method)
	if err != nil {
		return "", fmt.Errorf("%s_AUTODETECTION_METHOD=%q: %w", env, method, err)
	}
	p, _, err := autodetect.Detect(m, family, src)
	if err != nil {
		return "", fmt.Errorf("autodetect IPv%d address (%s_AUTODETECTION_METHOD=%q): %w", family, env, method, err)
	}
	return p.String(), nil
}

// checkConflicts refuses an address another node already registered: two
// nodes with one BGP address would break routing for both.
func checkConflicts(ctx context.Context, store Store, node *api.Node) error {
	if node.Spec.BGP == nil {
		return nil
	}
	mine := map[netip.Addr]bool{}
	for _, a := range []string{node.Spec.BGP.IPv4Address, node.Spec.BGP.IPv6Address} {
		if p, err := netip.ParsePrefix(a); err == nil {
			mine[p.Addr()] = true
		}
	}
	if len(mine) == 0 {
		return nil
	}
	others, _, err := store.List(ctx, "Node", "")
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	for _, o := range others {
		other := o.(*api.Node)
		if other.Name == node.Name || other.Spec.BGP == nil {
			continue
		}
		for _, a := range []string{other.Spec.BGP.IPv4Address, other.Spec.BGP.IPv6Address} {
			if p, err := netip.ParsePrefix(a); err == nil && mine[p.Addr()] {
				return fmt.Errorf("address %s is already used by Calico node %q; set IP/IP6 or the autodetection method so each node has its own", p.Addr(), other.Name)
			}
		}
	}
	return nil
}

// ensureClusterInformation creates the ClusterInformation if there is
// none. A locked datastore (datastoreReady false: a migration is in
// progress) does not stop start-up, as it does not stop calico-node's: the
// node registers, and the dataplane waits for the unlock.
func ensureClusterInformation(ctx context.Context, store Store, cfg Config, log *slog.Logger) error {
	obj, err := store.Get(ctx, "ClusterInformation", "", "default")
	switch {
	case err == nil:
		ci := obj.(*api.ClusterInformation)
		if ci.Spec.DatastoreReady != nil && !*ci.Spec.DatastoreReady {
			log.Warn("the datastore is locked (ClusterInformation default has datastoreReady: false; a migration or upgrade is in progress): the dataplane waits until `calicoctl datastore migrate unlock`")
		}
		return nil
	case !errors.Is(err, datastore.ErrNotFound):
		return fmt.Errorf("read ClusterInformation: %w", err)
	}
	guid := make([]byte, 16)
	if _, err := rand.Read(guid); err != nil {
		return fmt.Errorf("generate cluster GUID: %w", err)
	}
	ready := true
	ci := &api.ClusterInformation{}
	ci.Kind, ci.APIVersion, ci.Name = "ClusterInformation", api.GroupVersion, "default"
	ci.Spec.ClusterGUID = hex.EncodeToString(guid)
	ci.Spec.DatastoreReady = &ready
	ci.Spec.CalicoVersion = cfg.Version
	ci.Spec.ClusterType = clusterType(cfg.ClusterType, store)
	if _, err := store.Create(ctx, ci); err != nil && !errors.Is(err, datastore.ErrAlreadyExists) {
		return fmt.Errorf("create ClusterInformation: %w", err)
	}
	return nil
}

// clusterType is CLUSTER_TYPE as Calico's clientv3 records it: on the
// Kubernetes datastore "kdd" is appended ("k8s,bgp,kdd"; "kdd" alone when
// unset), which is how Calico's components tell the datastore type.
func clusterType(configured string, store Store) string {
	typed, ok := store.(interface{ Type() string })
	if !ok || typed.Type() != datastore.TypeKubernetes {
		return configured
	}
	configured = strings.TrimSuffix(configured, ",")
	if configured == "" {
		return "kdd"
	}
	if slices.Contains(strings.Split(configured, ","), "kdd") {
		return configured
	}
	return configured + ",kdd"
}

// ensureTiers creates the tiers Calico v3.31 always has.
func ensureTiers(ctx context.Context, store Store) error {
	tiers := []struct {
		name   string
		order  float64
		action string
	}{
		{"default", 1000000, "Deny"},
		{"adminnetworkpolicy", 1000, "Pass"},
		{"baselineadminnetworkpolicy", 10000000, "Pass"},
	}
	for _, t := range tiers {
		tier := &api.Tier{}
		tier.Kind, tier.APIVersion, tier.Name = "Tier", api.GroupVersion, t.name
		order := t.order
		tier.Spec.Order = &order
		action := api.Action(t.action)
		tier.Spec.DefaultAction = &action
		if _, err := store.Create(ctx, tier); err != nil && !errors.Is(err, datastore.ErrAlreadyExists) {
			return fmt.Errorf("create tier %s: %w", t.name, err)
		}
	}
	return nil
}

// ensureDefaultPools creates a default pool per family that has none.
func ensureDefaultPools(ctx context.Context, store Store, cfg Config, log *slog.Logger) error {
	objs, _, err := store.List(ctx, "IPPool", "")
	if err != nil {
		return fmt.Errorf("list IP pools: %w", err)
	}
	have := map[int]bool{}
	pools, errs := api.ParsePools(objs)
	for _, p := range pools {
		have[p.Version()] = true
	}
	// A pool that does not parse is skipped by every consumer, but one
	// whose CIDR did parse still means the user chose that family's pool:
	// creating a default beside it would hand out addresses they did not
	// ask for (Calico's start-up looks at the CIDR alone, too).
	for _, err := range errs {
		log.Warn("ignoring unusable IP pool", "err", err)
		var pe *api.PoolError
		if errors.As(err, &pe) && pe.CIDR.IsValid() {
			have[family(pe.CIDR.Addr())] = true
		}
	}
	for _, want := range []struct {
		fam  int
		name string
		pc   PoolConfig
	}{
		{4, "default-ipv4-ippool", cfg.IPv4Pool},
		{6, "default-ipv6-ippool", cfg.IPv6Pool},
	} {
		if have[want.fam] || want.pc.CIDR == "" {
			continue
		}
		pool, err := buildPool(want.name, want.fam, want.pc)
		if err != nil {
			return err
		}
		if _, err := store.Create(ctx, pool); err != nil {
			if errors.Is(err, datastore.ErrAlreadyExists) {
				continue // another node created it first
			}
			return fmt.Errorf("create default pool %s: %w", want.name, err)
		}
		log.Info("created default IP pool", "name", want.name, "cidr", pool.Spec.CIDR)
	}
	return nil
}

func buildPool(name string, fam int, pc PoolConfig) (*api.IPPool, error) {
	env := "CALICO_IPV" + strconv.Itoa(fam) + "POOL_CIDR"
	pool := &api.IPPool{}
	pool.Kind, pool.APIVersion, pool.Name = "IPPool", api.GroupVersion, name
	pool.Spec.CIDR = pc.CIDR
	// The CIDR is read as every consumer reads a pool's, masked: Calico's
	// start-up takes "10.0.0.1/16" as 10.0.0.0/16. A problem in another
	// field is left to Validate, which names it.
	var cidr netip.Prefix
	var pe *api.PoolError
	if p, err := api.ParsePool(pool); err == nil {
		cidr = p.CIDR
	} else if errors.As(err, &pe) && pe.CIDR.IsValid() {
		cidr = pe.CIDR
	} else {
		return nil, fmt.Errorf("%s=%q is not a valid CIDR", env, pc.CIDR)
	}
	if family(cidr.Addr()) != fam {
		return nil, fmt.Errorf("%s=%q is not an IPv%d CIDR", env, pc.CIDR, fam)
	}
	pool.Spec.CIDR = cidr.String()
	pool.Spec.BlockSize = pc.BlockSize
	pool.Spec.IPIPMode = api.IPIPMode(normaliseMode(pc.IPIPMode))
	pool.Spec.VXLANMode = api.VXLANMode(normaliseMode(pc.VXLANMode))
	pool.Spec.NATOutgoing = pc.NATOutgoing
	pool.Spec.NodeSelector = pc.NodeSelector
	pool.Default()
	if err := pool.Validate(); err != nil {
		return nil, fmt.Errorf("default pool %s from the CALICO_IPV%dPOOL_* settings: %w", name, fam, err)
	}
	return pool, nil
}

// normaliseMode accepts calico-node's spellings (always, cross-subnet,
// CrossSubnet, never, off).
func normaliseMode(m string) string {
	switch strings.ToLower(strings.ReplaceAll(m, "-", "")) {
	case "always":
		return "Always"
	case "crosssubnet":
		return "CrossSubnet"
	case "", "never", "off":
		return "Never"
	}
	return m // let validation name the bad value
}

func family(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, 0o644)
}
