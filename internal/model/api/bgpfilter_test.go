package api

import (
	"errors"
	"strings"
	"testing"
)

// TestValidateBGPFilterRejects: each rule Calico's validator refuses is
// refused here, naming the field, with Calico's reason where Calico words
// one (its struct-level checks).
func TestValidateBGPFilterRejects(t *testing.T) {
	i32 := func(v int32) *int32 { return &v }
	v4 := func(r BGPFilterRuleV4) BGPFilterSpec { return BGPFilterSpec{ExportV4: []BGPFilterRuleV4{r}} }
	v6 := func(r BGPFilterRuleV6) BGPFilterSpec { return BGPFilterSpec{ImportV6: []BGPFilterRuleV6{r}} }
	tests := []struct {
		name string
		spec BGPFilterSpec
		path string // the field named
		msg  string // in the error
	}{
		{"no action", v4(BGPFilterRuleV4{CIDR: "10.0.0.0/8", MatchOperator: MatchOperatorIn}), "spec.exportV4[0].action", "required"},
		{"unknown action", v4(BGPFilterRuleV4{Action: "Drop"}), "spec.exportV4[0].action", "must be one of"},
		{"cidr without matchOperator", v4(BGPFilterRuleV4{CIDR: "10.0.0.0/8", Action: BGPFilterAccept}),
			"spec.exportV4[0].cidr", "MatchOperator cannot be empty when CIDR is not"},
		{"matchOperator without cidr", v4(BGPFilterRuleV4{MatchOperator: MatchOperatorEqual, Action: BGPFilterAccept}),
			"spec.exportV4[0].matchOperator", "CIDR cannot be empty when MatchOperator is not"},
		{"unknown matchOperator", v4(BGPFilterRuleV4{CIDR: "10.0.0.0/8", MatchOperator: "Like", Action: BGPFilterAccept}),
			"spec.exportV4[0].matchOperator", "must be one of"},
		{"prefixLength without cidr", v4(BGPFilterRuleV4{PrefixLength: &BGPFilterPrefixLengthV4{Min: i32(24)}, Action: BGPFilterAccept}),
			"spec.exportV4[0].prefixLength", "CIDR cannot be empty when PrefixLength is not"},
		{"IPv4 prefixLength above 32", v4(BGPFilterRuleV4{CIDR: "10.0.0.0/8", MatchOperator: MatchOperatorIn, Action: BGPFilterAccept,
			PrefixLength: &BGPFilterPrefixLengthV4{Max: i32(33)}}), "spec.exportV4[0].prefixLength.max", "between 0 and 32"},
		{"negative prefixLength", v4(BGPFilterRuleV4{CIDR: "10.0.0.0/8", MatchOperator: MatchOperatorIn, Action: BGPFilterAccept,
			PrefixLength: &BGPFilterPrefixLengthV4{Min: i32(-1)}}), "spec.exportV4[0].prefixLength.min", "between 0 and 32"},
		{"IPv6 prefixLength above 128", v6(BGPFilterRuleV6{CIDR: "fd00::/8", MatchOperator: MatchOperatorIn, Action: BGPFilterAccept,
			PrefixLength: &BGPFilterPrefixLengthV6{Min: i32(129)}}), "spec.importV6[0].prefixLength.min", "between 0 and 128"},
		{"IPv6 cidr in an IPv4 rule", v4(BGPFilterRuleV4{CIDR: "fd00::/8", MatchOperator: MatchOperatorIn, Action: BGPFilterAccept}),
			"spec.exportV4[0].cidr", "is not an IPv4 CIDR"},
		{"IPv4 cidr in an IPv6 rule", v6(BGPFilterRuleV6{CIDR: "10.0.0.0/8", MatchOperator: MatchOperatorIn, Action: BGPFilterAccept}),
			"spec.importV6[0].cidr", "is not an IPv6 CIDR"},
		{"not a cidr", v4(BGPFilterRuleV4{CIDR: "ten/8", MatchOperator: MatchOperatorIn, Action: BGPFilterAccept}),
			"spec.exportV4[0].cidr", "is not a valid CIDR"},
		{"host bits set", v4(BGPFilterRuleV4{CIDR: "10.1.2.3/8", MatchOperator: MatchOperatorIn, Action: BGPFilterAccept}),
			"spec.exportV4[0].cidr", "host bits are set (did you mean 10.0.0.0/8?)"},
		{"interface too long", v4(BGPFilterRuleV4{Interface: "a-very-long-interface", Action: BGPFilterAccept}),
			"spec.exportV4[0].interface", "is not a valid interface pattern"},
		{"interface with a slash", v4(BGPFilterRuleV4{Interface: "eth0/1", Action: BGPFilterAccept}),
			"spec.exportV4[0].interface", "is not a valid interface pattern"},
		{"unknown source", v4(BGPFilterRuleV4{Source: "Anywhere", Action: BGPFilterAccept}),
			"spec.exportV4[0].source", "must be one of RemotePeers"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &BGPFilter{TypeMeta: TypeMeta{Kind: "BGPFilter", APIVersion: GroupVersion}, ObjectMeta: ObjectMeta{Name: "f"}, Spec: tc.spec}
			err := f.Validate()
			var ve ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate() = %v, want a ValidationError", err)
			}
			for _, fe := range ve {
				if fe.Path == tc.path && strings.Contains(fe.Msg, tc.msg) {
					return
				}
			}
			t.Errorf("Validate() = %v, want %s: ...%s...", err, tc.path, tc.msg)
		})
	}
	// What Calico accepts passes: every field set right, wildcard
	// interfaces, both bounds.
	ok := &BGPFilter{TypeMeta: TypeMeta{Kind: "BGPFilter", APIVersion: GroupVersion}, ObjectMeta: ObjectMeta{Name: "f"}, Spec: BGPFilterSpec{
		ExportV4: []BGPFilterRuleV4{{CIDR: "10.0.0.0/8", MatchOperator: MatchOperatorIn, PrefixLength: &BGPFilterPrefixLengthV4{Min: i32(16), Max: i32(32)},
			Source: BGPFilterSourceRemotePeers, Interface: "cali*", Action: BGPFilterReject}},
		ImportV6: []BGPFilterRuleV6{{CIDR: "fd00::/8", MatchOperator: MatchOperatorNotIn, PrefixLength: &BGPFilterPrefixLengthV6{Max: i32(128)}, Action: BGPFilterAccept},
			{Interface: "*", Action: BGPFilterAccept}},
	}}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid filter refused: %v", err)
	}
}
