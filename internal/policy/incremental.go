package policy

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// Compiler compiles a stream of snapshots of one node, reusing what the
// previous compilation produced where its inputs did not change. Its
// result is always exactly Compile's for the same snapshot (a property
// test checks that after every step of long random change sequences);
// only the cost differs.
//
// What it reuses, and why it is enough: endpoint chains are two in three
// of all chains and nine in ten of all rules at scale, and an endpoint
// chain is a function of a small key (the endpoint's interface and name,
// the kind and direction of the chain, the tiers and policies that select
// it, its profiles) once the configuration is fixed. The compiler keeps
// those chains by key, and returns the very same Rules slice when the key
// is unchanged, so that a programmer can keep each chain's rule hashes
// by slice identity (see RulesIdentity) and hash only the chains that
// changed. Beyond the endpoint chains it keeps, each for as long as its
// inputs stay the same: every policy's parsed rules and rendered chains
// (policyEntry), every workload's entity and label key (entityCache), each
// IP set that selects no changed entity, the workload dispatch chains
// while the interfaces are the same, which IP sets each chain refers to,
// and each selector's verdict per label set (matchCache). A change then
// costs what it touches plus a walk over the endpoints and chains. A
// change of Config drops everything.
//
// Contract: a snapshot given to Compile is never modified afterwards; a
// changed object is a new one with new maps and slices (confwatch decodes
// every update afresh). The caches recognise unchanged policies and
// endpoints by the identity of those maps and slices, not by content.
//
// A Compiler is not safe for concurrent use; results must not be
// modified (their Rules and IP set members are shared with later
// results).
type Compiler struct {
	cfg   Config
	valid bool
	cache *chainCache
	match *matchCache
}

// NewCompiler returns an empty incremental compiler.
func NewCompiler() *Compiler { return &Compiler{} }

// Compile is Compile(s), computed incrementally.
func (ic *Compiler) Compile(s *Snapshot) *Result {
	cfg := s.Config.withDefaults()
	if !ic.valid || !reflect.DeepEqual(cfg, ic.cfg) {
		ic.cfg, ic.valid = cfg, true
		ic.cache = newChainCache()
		ic.match = newMatchCache()
	}
	res := compile(s, ic.cache, ic.match)
	ic.cache.rotate()
	ic.match.rotate(len(s.WorkloadEndpoints))
	return res
}

// chainCache keeps endpoint chain rules by key for one configuration. It
// is generational: what one compilation did not use is forgotten after
// it, so that the cache holds one ruleset's chains at most.
type chainCache struct {
	prev, cur map[string][]Rule
	buf       strings.Builder
	// pols, prevPols keep each policy's parsed rules and rendered
	// chains, generationally as above.
	pols, prevPols map[policyID]*policyEntry
	// tierIDs numbers the tier lists' texts for the cache's lifetime
	// (forgotten with the cache when it holds many more than are in
	// use); tiersByRef is tiersID's memo for one compilation.
	tierIDs    map[string]int
	lastTierID int
	tiersByRef map[tiersRef]int
	ents       *entityCache
	// dispatch, nextDispatch keep the workload dispatch chains by
	// interfaces (workloadDispatch); sets, nextSets each chain's IP set
	// names by its rules' identity (chainSets). Both generational.
	dispatch, nextDispatch map[string][]Chain
	sets, nextSets         map[RulesIdentity][]string
	// targets, nextTargets each chain's jump targets (chainTargets).
	targets, nextTargets map[RulesIdentity][]string
}

// chainSets are the IP sets c's rules match on; with a cache, found once
// for as long as c has the same rules. cc may be nil.
func (cc *chainCache) chainSets(c *Chain) []string {
	if cc == nil {
		return matchedSets(c.Rules)
	}
	return cc.perRules(c, cc.sets, cc.nextSets, matchedSets)
}

// chainTargets are the chains c's rules jump or go to, kept the same way.
func (cc *chainCache) chainTargets(c *Chain) []string {
	if cc == nil {
		return jumpTargets(c.Rules)
	}
	return cc.perRules(c, cc.targets, cc.nextTargets, jumpTargets)
}

// perRules is f(c.Rules), looked up by the rules' identity in this
// compilation's next and the last one's prev maps, and kept in next.
func (cc *chainCache) perRules(c *Chain, prev, next map[RulesIdentity][]string, f func([]Rule) []string) []string {
	id, ok := c.Identity()
	if !ok {
		return f(c.Rules)
	}
	if v, ok := next[id]; ok {
		return v
	}
	v, ok := prev[id]
	if !ok {
		v = f(c.Rules)
	}
	next[id] = v
	return v
}

func newChainCache() *chainCache {
	return &chainCache{cur: map[string][]Rule{}, pols: map[policyID]*policyEntry{},
		tierIDs: map[string]int{}, tiersByRef: map[tiersRef]int{}, ents: newEntityCache(),
		nextDispatch: map[string][]Chain{}, nextSets: map[RulesIdentity][]string{}, nextTargets: map[RulesIdentity][]string{}}
}

// policyID names a policy's cache entry: the parse depends on its
// namespace, and the rendered chains on its key and tier (their comments,
// origins and log prefixes).
type policyID struct{ key, namespace, tier string }

// policyEntry is one policy's parsed rules and its rendered chains, valid
// while its rules are the very slices they were made from. Snapshots are
// never modified in place (confwatch decodes each update into a new
// object; the Compiler's contract), so a changed policy has new rule
// slices, and the entry holds the old ones so that their memory cannot
// be reused for a new policy's rules while it is kept.
type policyEntry struct {
	inSrc, outSrc []api.Rule
	parsed        bool
	in, out       []*parsedRule
	// problems are what parsing reported, in order; sets the IP set
	// definitions the parsed rules use.
	problems []string
	sets     []*setDef
	rendered map[renderKey][]Rule
}

// renderKey is what a policy chain's rendering depends on besides the
// policy and the cache's configuration: the family, the deny action
// (DROP outside the filter table) and the direction.
type renderKey struct {
	version int
	deny    string
	inbound bool
}

// policy returns p's entry, a fresh one when p's rules are not those the
// kept entry was made from.
func (cc *chainCache) policy(p *policyInfo) *policyEntry {
	id := policyID{p.key, p.namespace, p.tier}
	e := cc.pols[id]
	if e == nil {
		e = cc.prevPols[id]
	}
	if e == nil || !sameRules(e.inSrc, p.inRules) || !sameRules(e.outSrc, p.outRules) {
		e = &policyEntry{inSrc: p.inRules, outSrc: p.outRules, rendered: map[renderKey][]Rule{}}
	}
	cc.pols[id] = e
	return e
}

// sameRules reports whether a and b are the same slice (not merely equal
// ones).
func sameRules(a, b []api.Rule) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// ruleSets are the IP set definitions the rules use.
func ruleSets(lists ...[]*parsedRule) []*setDef {
	var out []*setDef
	for _, rules := range lists {
		for _, r := range rules {
			for _, sd := range []*side{&r.src, &r.dst} {
				for _, ds := range [][]*setDef{sd.sets, sd.notSets, sd.namedSets, sd.notNamed} {
					out = append(out, ds...)
				}
			}
		}
	}
	return out
}

func (cc *chainCache) get(key string) ([]Rule, bool) {
	if r, ok := cc.cur[key]; ok {
		return r, true
	}
	if r, ok := cc.prev[key]; ok {
		cc.cur[key] = r
		return r, true
	}
	return nil, false
}

func (cc *chainCache) put(key string, rules []Rule) { cc.cur[key] = rules }

func (cc *chainCache) rotate() {
	cc.prev, cc.cur = cc.cur, make(map[string][]Rule, len(cc.cur))
	cc.prevPols, cc.pols = cc.pols, make(map[policyID]*policyEntry, len(cc.pols))
	if len(cc.tierIDs) > 2*len(cc.tiersByRef)+1024 {
		// Numbers of tier lists no longer in use: start again, which
		// changes every key (the next compilation renders every
		// endpoint chain once more).
		cc.tierIDs, cc.prev = map[string]int{}, nil
	}
	cc.tiersByRef = make(map[tiersRef]int, len(cc.tiersByRef))
	cc.ents.rotate()
	cc.dispatch, cc.nextDispatch = cc.nextDispatch, make(map[string][]Chain, len(cc.nextDispatch))
	cc.sets, cc.nextSets = cc.nextSets, make(map[RulesIdentity][]string, len(cc.nextSets))
	cc.targets, cc.nextTargets = cc.nextTargets, make(map[RulesIdentity][]string, len(cc.nextTargets))
}

// endpointKey is everything endpointRules reads besides the family
// compiler's configuration and marks (fixed for the cache's lifetime).
// The chain's name and endpoint are not part of it: the rules do not
// name them, so endpoints with the same policies and profiles in the
// same kind of chain (the pods of one workload, whose labels are the
// same) share one rules slice. That is most of a node's rules held once
// per distinct chain rather than once per endpoint; a consumer that
// keeps something per chain keys it by name and identity
// (RulesIdentity), and hashes, which depend on the name, stay per chain.
func (cc *chainCache) endpointKey(c *famCompiler, spec *endpointChainSpec) string {
	b := &cc.buf
	b.Reset()
	sep := func() { b.WriteByte(0) }
	b.WriteString(strconv.Itoa(c.version))
	sep()
	b.WriteString(c.cfg.DenyAction)
	sep()
	b.WriteString(strconv.Itoa(int(spec.kind)))
	sep()
	fmt.Fprintf(b, "%t%t%t", spec.host, spec.inbound, spec.dropEncap)
	sep()
	b.WriteString(spec.failsafe)
	sep()
	if spec.allow != nil {
		fmt.Fprintf(b, "%T%v", spec.allow, spec.allow)
	}
	sep()
	for _, p := range spec.profiles {
		b.WriteString(p)
		b.WriteByte(1)
	}
	sep()
	b.WriteString(strconv.Itoa(cc.tiersID(spec.tiers)))
	return b.String()
}

// tiersRef identifies a tier list within one compilation: endpoints with
// equal labels share theirs (buildLocal), so most endpoint chains' tiers
// are one of a few slices.
type tiersRef struct {
	first *epTier
	n     int
}

// tiersID is a small number for the content of a tier list, the same in
// every compilation for equal content, so that endpoint keys stay short
// (a thousand endpoints' keys spelling out every policy took megabytes)
// and a tier list's text is written once per compilation, not once per
// endpoint chain.
func (cc *chainCache) tiersID(tiers []epTier) int {
	if len(tiers) == 0 {
		return 0
	}
	ref := tiersRef{&tiers[0], len(tiers)}
	if id, ok := cc.tiersByRef[ref]; ok {
		return id
	}
	var b strings.Builder
	for _, t := range tiers {
		b.WriteString(t.name)
		b.WriteByte(1)
		b.WriteString(string(t.defaultAction))
		for _, p := range t.policies {
			// Grouping and group chain names follow the selectors.
			b.WriteByte(2)
			b.WriteString(p.key)
			b.WriteByte(3)
			b.WriteString(p.selectorText)
		}
		b.WriteByte(4)
	}
	text := b.String()
	id, ok := cc.tierIDs[text]
	if !ok {
		cc.lastTierID++
		id = cc.lastTierID
		cc.tierIDs[text] = id
	}
	cc.tiersByRef[ref] = id
	return id
}

// RulesIdentity identifies a chain's rules slice: equal identities (and
// equal chain names) mean the same rules, because Compiler returns the
// very slice it returned before for an unchanged chain and results are
// never modified. The zero value is never equal to another identity.
type RulesIdentity struct {
	first *Rule
	n     int
}

// Identity returns the identity of c's rules; ok is false for a chain
// without rules (nothing to remember).
func (c *Chain) Identity() (id RulesIdentity, ok bool) {
	if len(c.Rules) == 0 {
		return RulesIdentity{}, false
	}
	return RulesIdentity{first: &c.Rules[0], n: len(c.Rules)}, true
}

// matchCache keeps, across compilations, which label sets each policy
// selector matches, so that a change re-evaluates only new selectors and
// new label sets. Label sets are interned to small numbers; a selector's
// matches are a slice indexed by them.
type matchCache struct {
	ids  map[string]int // labelsKey -> id
	prev map[string]*selMatches
	cur  map[string]*selMatches
}

// selMatches is one selector's verdict per label set id: 0 unknown,
// 1 no, 2 yes.
type selMatches struct{ v []uint8 }

func newMatchCache() *matchCache {
	return &matchCache{ids: map[string]int{}, prev: map[string]*selMatches{}, cur: map[string]*selMatches{}}
}

func (mc *matchCache) labelsID(key string) int {
	id, ok := mc.ids[key]
	if !ok {
		id = len(mc.ids)
		mc.ids[key] = id
	}
	return id
}

// resolve returns the matches of each policy of tiers, in tier and
// policy order.
func (mc *matchCache) resolve(tiers []*tierInfo) []*selMatches {
	var out []*selMatches
	for _, t := range tiers {
		for _, p := range t.policies {
			sm := mc.cur[p.selectorText]
			if sm == nil {
				if sm = mc.prev[p.selectorText]; sm == nil {
					sm = &selMatches{}
				}
				mc.cur[p.selectorText] = sm
			}
			out = append(out, sm)
		}
	}
	return out
}

// rotate forgets selectors no policy used in the last compilation, and
// every label set once there are many more ids than label sets in use
// (pods come and go with fresh labels).
func (mc *matchCache) rotate(labelSets int) {
	mc.prev, mc.cur = mc.cur, make(map[string]*selMatches, len(mc.cur))
	if len(mc.ids) > 2*labelSets+1024 {
		mc.ids = map[string]int{}
		mc.prev = map[string]*selMatches{}
	}
}

func (sm *selMatches) matches(id int, sel func() bool) bool {
	if id >= len(sm.v) {
		sm.v = append(sm.v, make([]uint8, id+1-len(sm.v))...)
	}
	switch sm.v[id] {
	case 1:
		return false
	case 2:
		return true
	}
	ok := sel()
	sm.v[id] = 1
	if ok {
		sm.v[id] = 2
	}
	return ok
}

// tiersForCached is tiersFor(labels, normal) with each selector's verdict
// looked up in resolved (from matchCache.resolve over m.tiers) for the
// label set id.
func (m *model) tiersForCached(resolved []*selMatches, id int, labels map[string]string) (in, out []epTier) {
	return m.tiersMatching(func(i int, p *policyInfo) bool {
		return p.normal() && resolved[i].matches(id, func() bool { return p.selector.Evaluate(labels) })
	})
}

// labelsKey is a canonical text of a label set: equal keys, equal
// labels.
func labelsKey(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	n := 0
	for k, v := range labels {
		keys = append(keys, k)
		n += len(k) + len(v) + 2
	}
	slices.Sort(keys)
	var b strings.Builder
	b.Grow(n)
	for _, k := range keys {
		// Label keys and values cannot hold NUL.
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(labels[k])
		b.WriteByte(0)
	}
	return b.String()
}

// entityCache keeps, across compilations, the entities of workload
// endpoints (their labels merged with their profiles', their addresses
// and named ports) and the selector IP sets, so that a change reuses
// every set that selects none of the entities it changed: an IP set's
// members are a function of its selector and the entities, so a set
// that selects neither the old nor the new version of any changed entity
// has exactly its previous members.
//
// Workload entities are kept while the fields they are made of are the
// very maps and slices they were made from (snapshots are never modified
// in place; each entry holds its sources, so their memory cannot be
// reused while it is kept). Other entities are few and compared by
// content.
type entityCache struct {
	weps, prevWeps map[string]*wepEntry
	sets, prevSets map[setKey]IPSet
	// prevEnts are the last compilation's entities by kind and name;
	// changed the entities (old and new versions) this compilation
	// differs by, all that everything may have changed (no previous
	// compilation, or names that are not unique).
	prevEnts map[string]*entity
	changed  []*entity
	all      bool
}

type setKey struct {
	version int
	id      string
}

// wepEntry is a workload's entity and the sources it was made from.
type wepEntry struct {
	labels   map[string]string
	sa       string
	profiles []string
	plabels  []map[string]string // each profile's labelsToApply
	nets     []string
	ports    []api.WorkloadEndpointPort
	e        *entity
	problems []string
	// labelsKey is labelsKey(e.labels), once asked for.
	labelsKey string
}

// labels returns the labels of w's entity in this compilation and their
// labelsKey, or nil.
func (ec *entityCache) labels(w *api.WorkloadEndpoint) (map[string]string, string) {
	e := ec.weps[w.Namespace+"/"+w.Name]
	if e == nil || !sameMap(e.labels, w.Labels) || e.sa != w.Spec.ServiceAccountName || !sameSlice(e.profiles, w.Spec.Profiles) {
		// Not made from w (a second endpoint of the same name).
		return nil, ""
	}
	if e.labelsKey == "" {
		e.labelsKey = labelsKey(e.e.labels)
	}
	return e.e.labels, e.labelsKey
}

func newEntityCache() *entityCache {
	return &entityCache{weps: map[string]*wepEntry{}, sets: map[setKey]IPSet{}, all: true}
}

// workload returns w's entity, kept from an earlier compilation when it
// was made from the same sources, with the problems making it reported.
func (ec *entityCache) workload(m *model, w *api.WorkloadEndpoint, plabels profileLabels) *entity {
	name := w.Namespace + "/" + w.Name
	pl := make([]map[string]string, len(w.Spec.Profiles))
	for i, p := range w.Spec.Profiles {
		pl[i] = plabels[p]
	}
	e := ec.weps[name]
	if e == nil {
		e = ec.prevWeps[name]
	}
	if e != nil && sameMap(e.labels, w.Labels) && e.sa == w.Spec.ServiceAccountName && sameSlice(e.profiles, w.Spec.Profiles) &&
		slices.EqualFunc(e.plabels, pl, sameMap) && sameSlice(e.nets, w.Spec.IPNetworks) && sameSlice(e.ports, w.Spec.Ports) {
		ec.weps[name] = e
		m.problems = append(m.problems, e.problems...)
		return e.e
	}
	from := len(m.problems)
	e = &wepEntry{labels: w.Labels, sa: w.Spec.ServiceAccountName, profiles: w.Spec.Profiles, plabels: pl,
		nets: w.Spec.IPNetworks, ports: w.Spec.Ports, e: m.workloadEntity(w, plabels)}
	e.problems = slices.Clone(m.problems[from:])
	ec.weps[name] = e
	return e.e
}

// sameMap reports whether a and b are the same map (not merely equal
// ones); two nil maps are.
func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// sameSlice reports whether a and b are the same slice.
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// diff records how ents differ from the last compilation's entities.
func (ec *entityCache) diff(ents []*entity) {
	cur := make(map[string]*entity, len(ents))
	all := ec.all
	ec.changed = ec.changed[:0]
	for _, e := range ents {
		k := e.kind + "\x00" + e.name
		if _, dup := cur[k]; dup {
			all = true
		}
		cur[k] = e
		old := ec.prevEnts[k]
		switch {
		case old == e:
		case old == nil:
			ec.changed = append(ec.changed, e)
		case e.kind != "wep" && reflect.DeepEqual(old, e):
		default:
			ec.changed = append(ec.changed, old, e)
		}
	}
	for k, old := range ec.prevEnts {
		if _, ok := cur[k]; !ok {
			ec.changed = append(ec.changed, old)
		}
	}
	ec.prevEnts, ec.all = cur, all
}

// selectorSet is d's set for this compilation: the last one's when no
// changed entity is in it, before or after the change.
func (ec *entityCache) selectorSet(m *model, version int, d *setDef) IPSet {
	k := setKey{version, d.id}
	if s, ok := ec.sets[k]; ok {
		return s
	}
	s, ok := ec.prevSets[k]
	if !ok || ec.all || slices.ContainsFunc(ec.changed, d.selects) {
		s = m.selectorSet(version, d)
	}
	ec.sets[k] = s
	return s
}

func (ec *entityCache) rotate() {
	ec.prevWeps, ec.weps = ec.weps, make(map[string]*wepEntry, len(ec.weps))
	ec.prevSets, ec.sets = ec.sets, make(map[setKey]IPSet, len(ec.sets))
	ec.all = false
}
