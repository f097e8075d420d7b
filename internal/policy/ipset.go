package policy

import (
	"fmt"
	"net/netip"
	"strings"
)

// IP set types we create.
const (
	SetTypeNet    = "hash:net"
	SetTypeIPPort = "hash:ip,port"
)

// Names of the IP sets that do not come from selectors (felix's IDs).
const (
	setIDAllPools  = "network-ip-pools"
	setIDMasqPools = "masq-ipam-pools"
)

const maxSetNameLen = 31

// DefaultIPSetMaxElem is the maxelem of the IP sets felix creates unless
// FelixConfiguration's maxIpsetSize says otherwise.
const DefaultIPSetMaxElem = 1048576

// IPSet is one desired IP set with its complete membership.
type IPSet struct {
	// Name is the kernel name: "cali40" (IPv6: "cali60") followed by the
	// set's ID, cut to 31 characters, as felix names them.
	Name string
	// ID is Calico's ID of the set: "s:<hash>" for a selector, "n:<hash>"
	// for a named port, or a fixed word for the pool sets.
	ID string
	// Type is SetTypeNet or SetTypeIPPort.
	Type string
	// Family is "inet" or "inet6".
	Family string
	// Members are sorted and unique, written as `ipset save` lists them:
	// a bare address for a host prefix ("10.0.0.1"), a CIDR otherwise,
	// "addr,proto:port" for SetTypeIPPort.
	Members []string
}

func setName(version int, id string) string {
	n := fmt.Sprintf("cali%d0%s", version, id)
	if len(n) > maxSetNameLen {
		n = n[:maxSetNameLen]
	}
	return n
}

// tempSetName is the scratch set RenderIPSets fills before swapping it in.
func tempSetName(version int) string { return fmt.Sprintf("cali%dt0", version) }

// netMember writes a prefix as ipset lists it.
func netMember(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

// RenderIPSets returns `ipset restore` input that makes each given set
// exactly as desired without a moment in which it is empty: the members go
// into a scratch set that is then swapped with the live one. The live set
// is created if missing (-exist keeps an existing one). A live set of a
// different type cannot be swapped; the caller must destroy it first (after
// removing the rules that use it). maxElem is each set's maximum size
// (DefaultIPSetMaxElem, felix's default); 0 means that default.
func RenderIPSets(sets []IPSet, maxElem int) string {
	if maxElem <= 0 {
		maxElem = DefaultIPSetMaxElem
	}
	var b strings.Builder
	for i := range sets {
		s := &sets[i]
		version := 4
		if s.Family == "inet6" {
			version = 6
		}
		tmp := tempSetName(version)
		create := func(name string) {
			fmt.Fprintf(&b, "create %s %s family %s maxelem %d -exist\n", name, s.Type, s.Family, maxElem)
		}
		create(s.Name)
		// A scratch set left by an interrupted run may exist with another
		// type; destroying it first would fail when it is absent, so the
		// caller is expected to destroy stray scratch sets before a restore.
		create(tmp)
		fmt.Fprintf(&b, "flush %s\n", tmp)
		for _, m := range s.Members {
			fmt.Fprintf(&b, "add %s %s\n", tmp, m)
		}
		fmt.Fprintf(&b, "swap %s %s\n", tmp, s.Name)
		fmt.Fprintf(&b, "destroy %s\n", tmp)
	}
	return b.String()
}
