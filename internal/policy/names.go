package policy

import (
	"crypto/sha256"
	"crypto/sha3"
	"encoding/base64"
	"strconv"
)

// Chain names and prefixes, felix's.
const (
	chainInput           = "cali-INPUT"
	chainForward         = "cali-FORWARD"
	chainOutput          = "cali-OUTPUT"
	chainWorkloadToHost  = "cali-wl-to-host"
	chainFromWLDispatch  = "cali-from-wl-dispatch"
	chainToWLDispatch    = "cali-to-wl-dispatch"
	chainFromHEPDispatch = "cali-from-host-endpoint"
	chainToHEPDispatch   = "cali-to-host-endpoint"
	chainFromHEPForward  = "cali-from-hep-forward"
	chainToHEPForward    = "cali-to-hep-forward"
	chainPrerouting      = "cali-PREROUTING" // raw and mangle
	chainFailsafeIn      = "cali-failsafe-in"
	chainFailsafeOut     = "cali-failsafe-out"
	chainRPFSkip         = "cali-rpf-skip" // raw
	chainNATPostrouting  = "cali-POSTROUTING"
	chainNATOutgoing     = "cali-nat-outgoing"
	chainCIDRBlock       = "cali-cidr-block"
	pfxPolicyIn          = "cali-pi-"
	pfxPolicyOut         = "cali-po-"
	pfxProfileIn         = "cali-pri-"
	pfxProfileOut        = "cali-pro-"
	pfxGroupIn           = "cali-gi-"
	pfxGroupOut          = "cali-go-"
	pfxToWorkload        = "cali-tw-"
	pfxFromWorkload      = "cali-fw-"
	pfxToHost            = "cali-th-"
	pfxFromHost          = "cali-fh-"
	pfxToHostForward     = "cali-thfw-"
	pfxFromHostForward   = "cali-fhfw-"
	maxChainNameLen      = 28
	shortenedMarker      = "_"
)

// chainManglePostrouting has the nat table's chain name, as in felix; the
// tables keep them apart.
const chainManglePostrouting = "cali-POSTROUTING"

// lengthLimited returns prefix+suffix, or, when that is longer than max (or
// exactly max but starting with the marker, which could clash), prefix +
// "_" + a hash of suffix cut to fit: felix's GetLengthLimitedID.
func lengthLimited(prefix, suffix string, max int) string {
	total := len(prefix) + len(suffix)
	if total > max || (total == max && suffix[:1] == shortenedMarker) {
		sum := sha256.Sum256([]byte(suffix))
		h := base64.RawURLEncoding.EncodeToString(sum[:])
		return prefix + shortenedMarker + h[:max-1-len(prefix)]
	}
	return prefix + suffix
}

func policyChain(prefix, tier, key string) string {
	return lengthLimited(prefix, tier+"/"+key, maxChainNameLen)
}

func profileChain(prefix, name string) string {
	return lengthLimited(prefix, name, maxChainNameLen)
}

func endpointChain(prefix, iface string) string {
	return lengthLimited(prefix, iface, maxChainNameLen)
}

// makeUniqueID is libcalico-go's hash.MakeUniqueID.
func makeUniqueID(prefix, content string) string {
	sum := sha256.Sum224([]byte(prefix + ":" + content))
	return prefix + ":" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// groupChain names the chain of a policy group: a SHA3-224 over the
// group's tier, selector, direction and policy names, as felix's
// PolicyGroup.UniqueID.
func groupChain(inbound bool, tier, sel string, keys []string) string {
	h := sha3.New224()
	write := func(s string) {
		h.Write([]byte(s))
		h.Write([]byte("\n"))
	}
	dir, prefix := "outbound", pfxGroupOut
	if inbound {
		dir, prefix = "inbound", pfxGroupIn
	}
	write(tier)
	write(sel)
	write(dir)
	write(strconv.Itoa(len(keys)))
	for _, k := range keys {
		write(k)
	}
	id := base64.RawURLEncoding.EncodeToString(h.Sum(nil))
	return prefix + id[:maxChainNameLen-len(prefix)]
}
