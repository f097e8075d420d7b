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
