package datastore

import "testing"

// TestPolicyNames: Calico v3.31's tiered names (02b-policy-naming in the
// KDD reference capture), and the two it refuses, which are stored under
// the full name; whatever name comes back finds the policy again.
func TestPolicyNames(t *testing.T) {
	tests := []struct {
		name, tier     string
		stored, asRead string
	}{
		{"allow-dns", "default", "default.allow-dns", "allow-dns"},
		{"default.withprefix", "default", "default.withprefix", "default.withprefix"},
		{"security.block-bad", "security", "security.block-bad", "security.block-bad"},
		{"knp.default.allow-frontend", "default", "knp.default.allow-frontend", "knp.default.allow-frontend"},
		{"ossg.default.sg1", "default", "ossg.default.sg1", "ossg.default.sg1"},
		{"noprefix", "security", "security.noprefix", "security.noprefix"},
		{"a.b", "default", "default.a.b", "default.a.b"},
	}
	for _, tc := range tests {
		t.Run(tc.name+"@"+tc.tier, func(t *testing.T) {
			stored, user := PolicyNames(tc.name, tc.tier)
			if stored != tc.stored || user != tc.asRead {
				t.Errorf("PolicyNames(%q, %q) = %q, %q; want %q, %q", tc.name, tc.tier, stored, user, tc.stored, tc.asRead)
			}
			if got := PolicyStoredName(user); got != stored {
				t.Errorf("lookup by returned name %q finds %q, stored as %q", user, got, stored)
			}
		})
	}
}

// TestPolicyNameFromStored: without the recorded name only the default
// tier's prefix is dropped, as Calico reads data from before 3.30.
func TestPolicyNameFromStored(t *testing.T) {
	tests := []struct{ stored, tier, want string }{
		{"default.allow-dns", "", "allow-dns"},
		{"default.allow-dns", "default", "allow-dns"},
		{"security.block-bad", "security", "security.block-bad"},
		{"knp.default.x", "", "knp.default.x"},
	}
	for _, tc := range tests {
		if got := PolicyNameFromStored(tc.stored, tc.tier); got != tc.want {
			t.Errorf("PolicyNameFromStored(%q, %q) = %q, want %q", tc.stored, tc.tier, got, tc.want)
		}
	}
}

// TestTierFromPolicyName: the tier clientv3 reports for a policy stored
// without spec.tier (libcalico-go names.TierFromPolicyName).
func TestTierFromPolicyName(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"allow-dns", "default"},
		{"default.withprefix", "default"},
		{"security.block-bad", "security"},
		{"knp.default.web", "default"},
		{"kanp.adminnetworkpolicy.a", "adminnetworkpolicy"},
		{"kbanp.baselineadminnetworkpolicy.default", "baselineadminnetworkpolicy"},
		{"ossg.default.sg1", "default"},
	} {
		if got := TierFromPolicyName(tc.name); got != tc.want {
			t.Errorf("TierFromPolicyName(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}
