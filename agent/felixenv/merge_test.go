package felixenv

import (
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// TestMerge: FelixConfiguration default, then node.<name>, then FELIX_*
// environment, field by field; the result is compared as the JSON a
// FelixConfiguration with those values would hold (keys sorted).
func TestMerge(t *testing.T) {
	dur := func(d time.Duration) *api.Duration { return &api.Duration{Duration: d} }
	yes, no := true, false
	env := func(vars ...string) *api.FelixConfigurationSpec {
		t.Helper()
		ov, err := Parse(vars)
		if err != nil {
			t.Fatal(err)
		}
		return ov.Spec
	}
	tests := []struct {
		name               string
		global, node, envs *api.FelixConfigurationSpec
		want               string
	}{
		{name: "nothing set", want: `{}`},
		{
			name:   "default alone",
			global: &api.FelixConfigurationSpec{LogSeverityScreen: "Warning", RouteRefreshInterval: dur(30 * time.Second)},
			want:   `{"logSeverityScreen":"Warning","routeRefreshInterval":"30s"}`,
		},
		{
			name:   "node overrides default field by field",
			global: &api.FelixConfigurationSpec{LogSeverityScreen: "Warning", RouteRefreshInterval: dur(30 * time.Second), IPv6Support: &yes},
			node:   &api.FelixConfigurationSpec{LogSeverityScreen: "Debug"},
			want:   `{"ipv6Support":true,"logSeverityScreen":"Debug","routeRefreshInterval":"30s"}`,
		},
		{
			name:   "explicit zero and false in the node config win",
			global: &api.FelixConfigurationSpec{RouteRefreshInterval: dur(30 * time.Second), IPv6Support: &yes},
			node:   &api.FelixConfigurationSpec{RouteRefreshInterval: dur(0), IPv6Support: &no},
			want:   `{"ipv6Support":false,"routeRefreshInterval":"0s"}`,
		},
		{
			name:   "environment overrides both",
			global: &api.FelixConfigurationSpec{LogSeverityScreen: "Warning", IptablesRefreshInterval: dur(10 * time.Second)},
			node:   &api.FelixConfigurationSpec{LogSeverityScreen: "Debug", RouteRefreshInterval: dur(5 * time.Second)},
			envs:   env("FELIX_LOGSEVERITYSCREEN=error", "FELIX_ROUTEREFRESHINTERVAL=0"),
			want:   `{"iptablesRefreshInterval":"10s","logSeverityScreen":"Error","routeRefreshInterval":"0s"}`,
		},
		{
			name: "environment alone",
			envs: env("FELIX_ROUTEREFRESHINTERVAL=2.5"),
			want: `{"routeRefreshInterval":"2.5s"}`,
		},
		{
			name: "node config without a default",
			node: &api.FelixConfigurationSpec{DefaultEndpointToHostAction: "Accept"},
			want: `{"defaultEndpointToHostAction":"Accept"}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Merge(tc.global, tc.node, tc.envs)
			if b := specJSON(t, &got); b != tc.want {
				t.Errorf("Merge = %s\nwant    %s", b, tc.want)
			}
		})
	}
}

// TestMergeLeavesLayersAlone: merging does not write into its inputs.
func TestMergeLeavesLayersAlone(t *testing.T) {
	global := &api.FelixConfigurationSpec{LogSeverityScreen: "Info"}
	node := &api.FelixConfigurationSpec{LogSeverityScreen: "Debug"}
	_ = Merge(global, node)
	if global.LogSeverityScreen != "Info" || node.LogSeverityScreen != "Debug" {
		t.Errorf("layers changed: default %q, node %q", global.LogSeverityScreen, node.LogSeverityScreen)
	}
}

// TestForNode: the node's own FelixConfiguration and the environment are
// layered over "default"; another node's configuration does not count.
func TestForNode(t *testing.T) {
	mtu := func(v int) *int { return &v }
	configs := map[string]*api.FelixConfiguration{
		"default":    {ObjectMeta: api.ObjectMeta{Name: "default"}, Spec: api.FelixConfigurationSpec{VXLANMTU: mtu(1400), IPIPMTU: mtu(1300), LogSeverityScreen: "Warning"}},
		"node.node1": {ObjectMeta: api.ObjectMeta{Name: "node.node1"}, Spec: api.FelixConfigurationSpec{VXLANMTU: mtu(1350), LogSeverityScreen: "Debug"}},
		"node.node2": {ObjectMeta: api.ObjectMeta{Name: "node.node2"}, Spec: api.FelixConfigurationSpec{IPIPMTU: mtu(1000)}},
	}
	lookup := func(name string) *api.FelixConfiguration { return configs[name] }
	got := ForNode("node1", lookup, &api.FelixConfigurationSpec{LogSeverityScreen: "Error"})
	if *got.VXLANMTU != 1350 || *got.IPIPMTU != 1300 || got.LogSeverityScreen != "Error" {
		t.Errorf("node1: vxlanMTU %d ipipMTU %d logSeverityScreen %s, want 1350 1300 Error", *got.VXLANMTU, *got.IPIPMTU, got.LogSeverityScreen)
	}
	got = ForNode("node3", lookup, nil)
	if *got.VXLANMTU != 1400 || *got.IPIPMTU != 1300 || got.LogSeverityScreen != "Warning" {
		t.Errorf("node3: vxlanMTU %d ipipMTU %d logSeverityScreen %s, want the default's", *got.VXLANMTU, *got.IPIPMTU, got.LogSeverityScreen)
	}
}
