package datastore

import (
	"strings"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// Naming rules shared by both backends.

// Calico's tiered policy names (libcalico-go lib/names, v3.31), shared by
// both backends so that a policy gets the same stored name, and comes back
// under the same name, whichever datastore holds it.
//
// A policy in tier T is stored under "T.<name>"; the name the user wrote is
// recorded in the projectcalico.org/metadata annotation and restored on
// read. Calico v3.31 refuses a policy outside the default tier whose name
// lacks the "T." prefix, and a dotted name in the default tier ("Incorrectly
// formatted policy name"). Both backends accept them instead: the policy is
// stored under "T.<name>" and that full name is also the name recorded for
// the user, so Get and Delete find it by the name the store returns, and
// real Calico reading the data shows the same name.

// MetadataAnnotation holds the v3 metadata Calico keeps out of the stored
// object's own metadata: the user's policy name in etcd; in the Kubernetes
// datastore the whole v3 ObjectMeta subset (name when it differs,
// creationTimestamp, labels, annotations).
const MetadataAnnotation = "projectcalico.org/metadata"

// IsTieredPolicyKind reports the kinds Calico stores under tier-prefixed
// names.
func IsTieredPolicyKind(kind string) bool {
	switch kind {
	case "NetworkPolicy", "GlobalNetworkPolicy", "StagedNetworkPolicy", "StagedGlobalNetworkPolicy":
		return true
	}
	return false
}

// IsGeneratedPolicyName reports names Calico's own translators produce
// (Kubernetes NetworkPolicy, admin network policies, OpenStack security
// groups). They already say where they belong and are stored as they are.
func IsGeneratedPolicyName(name string) bool {
	for _, p := range [...]string{
		"knp.default.",
		"kanp.adminnetworkpolicy.",
		"kbanp.baselineadminnetworkpolicy.",
		"ossg.",
	} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// PolicyNames maps the name a policy in tier is written with to the name it
// is stored under and the name recorded for (and shown to) the user.
func PolicyNames(name, tier string) (stored, user string) {
	switch {
	case IsGeneratedPolicyName(name), strings.HasPrefix(name, tier+"."):
		return name, name
	case tier == "default" && !strings.Contains(name, "."):
		return tier + "." + name, name
	default:
		full := tier + "." + name
		return full, full
	}
}

// PolicyStoredName is the stored name of a policy as a caller names it to
// Get or Delete: Calico's lookup rule, where a bare name is in the default
// tier and a dotted one carries its tier already.
func PolicyStoredName(name string) string {
	if IsGeneratedPolicyName(name) || strings.Contains(name, ".") {
		return name
	}
	return "default." + name
}

// PolicyNameFromStored is the name Calico shows for a policy stored without
// the recorded name (written by Calico 3.28 or older): only the "default."
// prefix of a default-tier policy is dropped.
func PolicyNameFromStored(stored, tier string) string {
	if tier == "" || tier == "default" {
		return strings.TrimPrefix(stored, "default.")
	}
	return stored
}

// TierFromPolicyName is the tier Calico's clientv3 reports for a policy
// read without spec.tier: a derived policy's own tier, else the part
// before the first dot, else the default tier.
func TierFromPolicyName(name string) string {
	for _, p := range [...]struct{ prefix, tier string }{
		{"knp.default.", "default"},
		{"kanp.adminnetworkpolicy.", "adminnetworkpolicy"},
		{"kbanp.baselineadminnetworkpolicy.", "baselineadminnetworkpolicy"},
		{"ossg.", "default"},
	} {
		if strings.HasPrefix(name, p.prefix) {
			return p.tier
		}
	}
	if tier, _, ok := strings.Cut(name, "."); ok {
		return tier
	}
	return "default"
}

// DefaultAllowProfileName is the Profile Calico provides on both
// datastores without storing it: it allows everything, for endpoints that
// must not be cut off (host endpoints list it).
const DefaultAllowProfileName = "projectcalico-default-allow"

// DefaultAllowProfile is that profile as Calico v3.31 shows it
// (resourceVersion "1", no uid or creationTimestamp).
func DefaultAllowProfile() *api.Profile {
	p := &api.Profile{TypeMeta: api.TypeMeta{Kind: "Profile", APIVersion: api.GroupVersion}}
	p.Name = DefaultAllowProfileName
	p.ResourceVersion = "1"
	p.Spec.Ingress = []api.Rule{{Action: api.Allow}}
	p.Spec.Egress = []api.Rule{{Action: api.Allow}}
	return p
}
