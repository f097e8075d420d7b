package felixenv

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/testkit/errtest"
	"github.com/projectcalico/calico-node/internal/testkit/texttest"
)

// TestParse sets one variable at a time and compares the JSON of the
// resulting spec: what a FelixConfiguration with that field would store.
func TestParse(t *testing.T) {
	tests := []struct {
		env      string
		wantJSON string // the spec's JSON without bpfLogLevel
		wantErr  string // substring; "" = no error
	}{
		// The seed DaemonSet's variables.
		{env: "FELIX_DEFAULTENDPOINTTOHOSTACTION=ACCEPT", wantJSON: `{"defaultEndpointToHostAction":"Accept"}`},
		{env: "FELIX_IPV6SUPPORT=false", wantJSON: `{"ipv6Support":false}`},
		{env: "FELIX_LOGSEVERITYSCREEN=info", wantJSON: `{"logSeverityScreen":"Info"}`},
		{env: "FELIX_IPINIPMTU=1440", wantJSON: `{"ipipMTU":1440}`},
		{env: "FELIX_HEALTHENABLED=true", wantJSON: `{"healthEnabled":true}`},
		// Names: JSON name, Go field name and Felix v1 names, any case.
		{env: "FELIX_IPIPMTU=1400", wantJSON: `{"ipipMTU":1400}`},
		{env: "FELIX_IpInIpEnabled=yes", wantJSON: `{"ipipEnabled":true}`},
		{env: "FELIX_WIREGUARDPERSISTENTKEEPALIVE=25", wantJSON: `{"wireguardKeepAlive":"25s"}`},
		{env: "FELIX_EXTERNALNODESCIDRLIST=10.0.0.0/24, 10.1.0.0/24", wantJSON: `{"externalNodesList":["10.0.0.0/24","10.1.0.0/24"]}`},
		// Value forms.
		{env: "FELIX_LOGSEVERITYFILE=warn", wantJSON: `{"logSeverityFile":"Warning"}`},
		{env: "FELIX_IPTABLESBACKEND=nft", wantJSON: `{"iptablesBackend":"NFT"}`},
		{env: "FELIX_IPTABLESMARKMASK=0xffff0000", wantJSON: `{"iptablesMarkMask":4294901760}`},
		{env: "FELIX_ROUTEREFRESHINTERVAL=90", wantJSON: `{"routeRefreshInterval":"1m30s"}`},
		{env: "FELIX_ROUTEREFRESHINTERVAL=2.5", wantJSON: `{"routeRefreshInterval":"2.5s"}`},
		{env: "FELIX_REPORTINGINTERVALSECS=0", wantJSON: `{"reportingInterval":"0s"}`},
		{env: "FELIX_IPTABLESLOCKPROBEINTERVALMILLIS=50", wantJSON: `{"iptablesLockProbeInterval":"50ms"}`},
		{env: "FELIX_IPTABLESREFRESHINTERVAL=1m30s", wantJSON: `{"iptablesRefreshInterval":"1m30s"}`},
		{env: "FELIX_FAILSAFEINBOUNDHOSTPORTS=tcp:22, udp:68,tcp:10.0.0.0/8:179", wantJSON: `{"failsafeInboundHostPorts":[{"protocol":"tcp","port":22},{"protocol":"udp","port":68},{"protocol":"tcp","port":179,"net":"10.0.0.0/8"}]}`},
		{env: "FELIX_FAILSAFEOUTBOUNDHOSTPORTS=none", wantJSON: `{"failsafeOutboundHostPorts":[]}`},
		{env: "FELIX_FAILSAFEINBOUNDHOSTPORTS=tcp:[fd00::/8]:22", wantJSON: `{"failsafeInboundHostPorts":[{"protocol":"tcp","port":22,"net":"fd00::/8"}]}`},
		{env: "FELIX_KUBENODEPORTRANGES=30000:32767,40000", wantJSON: `{"kubeNodePortRanges":["30000:32767",40000]}`},
		{env: "FELIX_NATPORTRANGE=32768:65535", wantJSON: `{"natPortRange":"32768:65535"}`},
		{env: "FELIX_ROUTETABLERANGES=1-250,300-400", wantJSON: `{"routeTableRanges":[{"min":1,"max":250},{"min":300,"max":400}]}`},
		{env: "FELIX_ROUTETABLERANGE=1-250", wantJSON: `{"routeTableRange":{"min":1,"max":250}}`},
		{env: "FELIX_HEALTHTIMEOUTOVERRIDES=InternalDataplaneMainLoop=30s,CalculationGraph=180", wantJSON: `{"healthTimeoutOverrides":[{"name":"InternalDataplaneMainLoop","timeout":"30s"},{"name":"CalculationGraph","timeout":"3m0s"}]}`},
		{env: `FELIX_ROUTETABLERANGES=[{"min":5,"max":6}]`, wantJSON: `{"routeTableRanges":[{"min":5,"max":6}]}`},
		{env: "FELIX_BPFLOGFILTERS=all=host 10.0.0.1", wantJSON: `{"bpfLogFilters":{"all":"host 10.0.0.1"}}`},
		{env: "FELIX_BPFCONNTRACKTIMEOUTS=TCPEstablished=1h,udpTimeout=60s", wantJSON: `{"bpfConntrackTimeouts":{"tcpEstablished":"1h","udpTimeout":"60s"}}`},
		{env: "FELIX_LOGFILEPATH=none", wantJSON: `{"logFilePath":"none"}`},
		{env: "FELIX_INTERFACEPREFIX=cali,tap", wantJSON: `{"interfacePrefix":"cali,tap"}`},
		{env: "FELIX_HEALTHHOST=0.0.0.0", wantJSON: `{"healthHost":"0.0.0.0"}`},
		// Bad values are errors naming the variable.
		{env: "FELIX_IPV6SUPPORT=maybe", wantErr: `FELIX_IPV6SUPPORT="maybe": not a boolean`},
		{env: "FELIX_IPINIPMTU=big", wantErr: "FELIX_IPINIPMTU"},
		{env: "FELIX_DEFAULTENDPOINTTOHOSTACTION=ALLOW", wantErr: "must be one of Drop, Accept, Return"},
		{env: "FELIX_ROUTEREFRESHINTERVAL=soon", wantErr: "not a duration"},
		{env: "FELIX_FAILSAFEINBOUNDHOSTPORTS=tcp:http", wantErr: "not protocol:port"},
		{env: "FELIX_ROUTETABLERANGE=1-999", wantErr: "FELIX_ROUTETABLERANGE"},
		{env: "FELIX_IPTABLESMARKMASK=-1", wantErr: "unsigned"},
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			got, err := Parse([]string{tt.env, "PATH=/bin"})
			if !errtest.Want(t, err, tt.wantErr) {
				return
			}
			if got.Spec == nil {
				t.Fatal("Spec = nil")
			}
			name, _, _ := strings.Cut(tt.env, "=")
			if len(got.Set) != 1 || got.Set[0] != name {
				t.Errorf("Set = %v, want [%s]", got.Set, name)
			}
			if js := specJSON(t, got.Spec); js != tt.wantJSON {
				t.Errorf("spec = %s\nwant   %s", js, tt.wantJSON)
			}
		})
	}
}

// specJSON marshals s without the always-present bpfLogLevel.
func specJSON(t *testing.T, s *api.FelixConfigurationSpec) string {
	t.Helper()
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "bpfLogLevel")
	out, _ := json.Marshal(m)
	return string(out)
}

func TestUnknownAndBootstrapNames(t *testing.T) {
	got, err := Parse([]string{
		"FELIX_NOSUCHTHING=1",
		"FELIX_TYPHAK8SSERVICENAME=calico-typha",
		"FELIX_DATASTORETYPE=etcdv3",
		"FELIX_IPV6SUPPORT=false",
		"FELIXIPV6SUPPORT=true", // no underscore: not a Felix variable
		"HOME=/root",
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got.Unknown, ",") != "FELIX_NOSUCHTHING" {
		t.Errorf("Unknown = %v, want [FELIX_NOSUCHTHING]", got.Unknown)
	}
	if strings.Join(got.Bootstrap, ",") != "FELIX_DATASTORETYPE,FELIX_TYPHAK8SSERVICENAME" {
		t.Errorf("Bootstrap = %v", got.Bootstrap)
	}
	if got.Spec == nil || got.Spec.IPv6Support == nil || *got.Spec.IPv6Support {
		t.Errorf("IPv6Support not set to false: %+v", got.Spec)
	}
}

func TestNothingSet(t *testing.T) {
	got, err := Parse([]string{"PATH=/bin", "FELIX_SOMETHINGELSE=x"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec != nil {
		t.Errorf("Spec = %+v, want nil when no field is set", got.Spec)
	}
}

// TestAllErrorsReported: every bad variable is named, not just the first.
func TestAllErrorsReported(t *testing.T) {
	_, err := Parse([]string{"FELIX_IPV6SUPPORT=maybe", "FELIX_IPINIPMTU=big"})
	if err == nil {
		t.Fatal("no error")
	}
	texttest.Contains(t, "error", err.Error(), "FELIX_IPV6SUPPORT", "FELIX_IPINIPMTU")
}

// TestConflictingFields: fields valid alone are checked together.
func TestConflictingFields(t *testing.T) {
	_, err := Parse([]string{"FELIX_ROUTETABLERANGE=1-250", "FELIX_ROUTETABLERANGES=1-250"})
	if err == nil {
		t.Fatal("routeTableRange with routeTableRanges accepted")
	}
}

// TestPrecedence: the environment outranks both datastore configurations
// when the dataplane merges them.
func TestPrecedence(t *testing.T) {
	ov, err := Parse([]string{"FELIX_DEFAULTENDPOINTTOHOSTACTION=ACCEPT", "FELIX_IPV6SUPPORT=false"})
	if err != nil {
		t.Fatal(err)
	}
	drop, on := "Drop", true
	global := &api.FelixConfigurationSpec{DefaultEndpointToHostAction: drop, IPv6Support: &on}
	node := &api.FelixConfigurationSpec{DefaultEndpointToHostAction: "Return"}
	merged := Merge(global, node, ov.Spec)
	cfg := policy.ConfigFromFelix(&merged)
	if cfg.EndpointToHostAction != "ACCEPT" || cfg.IPv6 {
		t.Errorf("merged config: endpoint-to-host %q, IPv6 %v; want ACCEPT and false", cfg.EndpointToHostAction, cfg.IPv6)
	}
}

// TestEveryFieldSettable: each field of the API type is reachable by its
// JSON name, and no Go field name or Felix v1 name shadows another
// field's JSON name.
func TestEveryFieldSettable(t *testing.T) {
	idx := fields()
	typ := reflect.TypeFor[api.FelixConfigurationSpec]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		f, ok := idx[strings.ToLower(name)]
		if !ok || f.jsonName != name {
			t.Errorf("FELIX_%s does not set %s (got %+v)", strings.ToUpper(name), name, f)
		}
	}
}
