package cni

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/errtest"
)

func TestParseConfErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		conf  string
		code  uint
		field string // the message must name it
	}{
		{"bad JSON", `{"name": "n", `, types.ErrDecodingFailure, ""},
		{"no name", `{"type":"calico","ipam":{"type":"calico-ipam"}}`, types.ErrInvalidNetworkConfig, "name"},
		{"bad name", `{"name":"a b","ipam":{"type":"calico-ipam"}}`, types.ErrInvalidNetworkConfig, "name"},
		{"mtu too small", `{"name":"n","mtu":10,"ipam":{"type":"calico-ipam"}}`, types.ErrInvalidNetworkConfig, "mtu"},
		{"mtu too big", `{"name":"n","mtu":70000,"ipam":{"type":"calico-ipam"}}`, types.ErrInvalidNetworkConfig, "mtu"},
		{"mtu string", `{"name":"n","mtu":"1500","ipam":{"type":"calico-ipam"}}`, types.ErrInvalidNetworkConfig, "mtu"},
		{"unknown datastore", `{"name":"n","datastore_type":"etcdv2","ipam":{"type":"calico-ipam"}}`, types.ErrInvalidNetworkConfig, "datastore_type"},
		{"no ipam", `{"name":"n"}`, types.ErrInvalidNetworkConfig, "ipam.type"},
		{"bad etcd endpoint", `{"name":"n","etcd_endpoints":"ftp://x:1","ipam":{"type":"calico-ipam"}}`, types.ErrInvalidNetworkConfig, "etcd_endpoints"},
		{"etcd endpoint without host", `{"name":"n","etcd_endpoints":"http://","ipam":{"type":"calico-ipam"}}`, types.ErrInvalidNetworkConfig, "etcd_endpoints"},
		{"bad etcd authority", `{"name":"n","etcd_authority":"%zz","ipam":{"type":"calico-ipam"}}`, types.ErrInvalidNetworkConfig, "etcd_authority"},
		{"bad log level", `{"name":"n","log_level":"loud","ipam":{"type":"calico-ipam"}}`, types.ErrInvalidNetworkConfig, "log_level"},
		{"bad policy type", `{"name":"n","policy":{"type":"istio"},"ipam":{"type":"calico-ipam"}}`, types.ErrInvalidNetworkConfig, "policy.type"},
		{"v6 pool in v4 list", `{"name":"n","ipam":{"type":"calico-ipam","ipv4_pools":["fd00::/64"]}}`, types.ErrInvalidNetworkConfig, "ipam.ipv4_pools"},
		{"bad pool CIDR", `{"name":"n","ipam":{"type":"calico-ipam","ipv6_pools":["fd00::/129"]}}`, types.ErrInvalidNetworkConfig, "ipam.ipv6_pools"},
		{"pools not a list", `{"name":"n","ipam":{"type":"calico-ipam","ipv4_pools":"10.0.0.0/8"}}`, types.ErrInvalidNetworkConfig, "ipam.ipv4_pools"},
		{"assign_ipv4 garbage", `{"name":"n","ipam":{"type":"calico-ipam","assign_ipv4":"maybe"}}`, types.ErrInvalidNetworkConfig, "ipam"},
		{"no family", `{"name":"n","ipam":{"type":"calico-ipam","assign_ipv4":"false"}}`, types.ErrInvalidNetworkConfig, "assign_ipv6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConf([]byte(tc.conf))
			e, ok := err.(*types.Error)
			if !ok {
				t.Fatalf("got %v (%T), want a CNI error", err, err)
			}
			if e.Code != tc.code {
				t.Errorf("code %d (%s), want %d", e.Code, e.Msg, tc.code)
			}
			if !strings.Contains(e.Msg, tc.field) {
				t.Errorf("message %q does not name %q", e.Msg, tc.field)
			}
		})
	}
}

// Every config shape in the seed documents parses.
func TestParseSeedConfigs(t *testing.T) {
	files, err := filepath.Glob("testdata/seed/*.conf")
	if err != nil || len(files) == 0 {
		t.Fatalf("no seed configs: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			// install-cni fills the template's placeholders.
			data = []byte(strings.NewReplacer(
				"__ETCD_ENDPOINTS__", "https://10.0.0.1:2379",
				"__KUBERNETES_SERVICE_HOST__", "10.96.0.1",
				"__KUBERNETES_SERVICE_PORT__", "443",
			).Replace(string(data)))
			c, err := parseConf(data)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if c.IPAMConf.Type != "calico-ipam" {
				t.Errorf("ipam type %q", c.IPAMConf.Type)
			}
		})
	}
}

func TestConfDefaultsAndOptions(t *testing.T) {
	t.Setenv("ETCD_ENDPOINTS", "")
	t.Setenv("ETCD_AUTHORITY", "")
	dual, err := parseConf([]byte(`{"name":"any_name","type":"calico","ipam":{"type":"calico-ipam",
		"assign_ipv4":"true","assign_ipv6":true,"ipv4_pools":["10.0.0.0/24","pool-a"],"ipv6_pools":["2001:db8::1/120"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if dual.assignV4() != 1 || dual.assignV6() != 1 {
		t.Errorf("assign v4/v6 = %d/%d, want 1/1", dual.assignV4(), dual.assignV6())
	}
	req := ipamRequestFromConf(dual)
	if !slices.Equal(req.v4Pools, []string{"10.0.0.0/24", "pool-a"}) || !slices.Equal(req.v6Pools, []string{"2001:db8::/120"}) {
		t.Errorf("pools %v %v: CIDRs must be canonical, names kept", req.v4Pools, req.v6Pools)
	}
	if eps, _ := dual.etcdEndpoints(); !slices.Equal(eps, []string{"http://127.0.0.1:2379"}) {
		t.Errorf("default endpoints %v", eps)
	}

	auth, _ := parseConf([]byte(`{"name":"n","etcd_authority":"10.1.1.1:2379","ipam":{"type":"calico-ipam"}}`))
	if eps, _ := auth.etcdEndpoints(); !slices.Equal(eps, []string{"http://10.1.1.1:2379"}) {
		t.Errorf("etcd_authority endpoints %v", eps)
	}
	t.Setenv("ETCD_ENDPOINTS", "https://a:1,https://b:2")
	if eps, _ := dual.etcdEndpoints(); !slices.Equal(eps, []string{"https://a:1", "https://b:2"}) {
		t.Errorf("ETCD_ENDPOINTS endpoints %v", eps)
	}
	if eps, _ := auth.etcdEndpoints(); !slices.Equal(eps, []string{"http://10.1.1.1:2379"}) {
		t.Errorf("config must win over the environment: %v", eps)
	}
}

// The MTU: the config's, else the one calico-node left in its directory,
// else 1500.
func TestMTU(t *testing.T) {
	for _, tc := range []struct {
		name, conf, file string // file: the mtu file's content ("": none)
		want             int
	}{
		{"default", `{}`, "", 1500},
		{"node's file", `{}`, "1440\n", 1440},
		{"config wins", `{"mtu":1400}`, "1440", 1400},
		{"file out of range", `{}`, "20", 1500},
		{"file not a number", `{}`, "auto", 1500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := parseTestConf(t, tc.conf)
			if tc.file != "" {
				if err := os.WriteFile(filepath.Join(c.calicoDir, "mtu"), []byte(tc.file), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := c.mtu(); got != tc.want {
				t.Errorf("mtu() = %d, want %d", got, tc.want)
			}
		})
	}
}

// parseTestConf parses a calico-ipam config with the fields of conf (a
// JSON object) added, reading the node's files from a directory of the
// test's own.
func parseTestConf(t *testing.T, conf string) *netConf {
	t.Helper()
	full := `{"name":"n","ipam":{"type":"calico-ipam"}`
	if rest := strings.TrimPrefix(conf, "{"); rest != "}" {
		full += "," + rest
	} else {
		full += "}"
	}
	c, err := parseConf([]byte(full))
	if err != nil {
		t.Fatal(err)
	}
	c.calicoDir = t.TempDir()
	return c
}

func TestNodename(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "nodename")
	if err := os.WriteFile(file, []byte("node-from-file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	for _, tc := range []struct {
		name, conf string
		// defaultFile is what calico-node left in its directory ("": none).
		defaultFile, want string
		wantErr           bool
	}{
		{"explicit", `{"nodename":"n1","nodename_file":"` + file + `"}`, "", "n1", false},
		{"file", `{"nodename_file":"` + file + `"}`, "", "node-from-file", false},
		{"configured file wins over the default one", `{"nodename_file":"` + file + `"}`, "default-node", "node-from-file", false},
		{"missing explicit file", `{"nodename_file":"` + filepath.Join(dir, "none") + `"}`, "", "", true},
		{"explicit file missing: no fallback", `{"hostname":"h1","nodename_file":"` + file + `x"}`, "default-node", "", true},
		{"default file", `{"hostname":"h1"}`, "default-node\n", "default-node", false},
		{"empty default file", `{"hostname":"h1"}`, "\n", "h1", false},
		{"hostname fallback", `{"hostname":"h1"}`, "", "h1", false},
		{"os hostname", `{}`, "", strings.ToLower(host), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := parseTestConf(t, tc.conf)
			if tc.defaultFile != "" {
				if err := os.WriteFile(filepath.Join(c.calicoDir, "nodename"), []byte(tc.defaultFile), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := c.nodename()
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("nodename() = %q, %v; want %q (error %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestWorkloadNaming(t *testing.T) {
	for _, tc := range []struct {
		name        string
		ids         workloadIDs
		wantName    string
		wantPrefix  string
		wantVethRef string
	}{
		{
			// The reference capture: real Calico v3.31, plain CNI.
			name:        "cni",
			ids:         workloadIDs{orchestrator: "cni", node: "node1", namespace: "default", containerID: "probecontainer000", endpoint: "eth0"},
			wantName:    "node1-cni-probecontainer000-eth0",
			wantPrefix:  "node1-cni-probecontainer000-",
			wantVethRef: "caliprobecontai",
		},
		{
			name:        "cni short ID",
			ids:         workloadIDs{orchestrator: "cni", node: "n", containerID: "abc", endpoint: "eth0"},
			wantName:    "n-cni-abc-eth0",
			wantPrefix:  "n-cni-abc-",
			wantVethRef: "caliabc",
		},
		{
			// Dashes are doubled in every part; the veth is sha1 of
			// "<namespace>.<pod>" (Calico's own test vector).
			name:        "k8s",
			ids:         workloadIDs{orchestrator: "k8s", node: "node-1", namespace: "namespace", pod: "podname", containerID: "x", endpoint: "eth0"},
			wantName:    "node--1-k8s-podname-eth0",
			wantPrefix:  "node--1-k8s-podname-",
			wantVethRef: "cali82111e10a96",
		},
		{
			name:        "k8s dashed pod",
			ids:         workloadIDs{orchestrator: "k8s", node: "node1", namespace: "default", pod: "web-1-abc", endpoint: "eth0"},
			wantName:    "node1-k8s-web--1--abc-eth0",
			wantPrefix:  "node1-k8s-web--1--abc-",
			wantVethRef: "",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("FELIX_INTERFACEPREFIX", "")
			name, err := tc.ids.name()
			if err != nil || name != tc.wantName {
				t.Errorf("name() = %q, %v; want %q", name, err, tc.wantName)
			}
			prefix, err := tc.ids.namePrefix()
			if err != nil || prefix != tc.wantPrefix {
				t.Errorf("namePrefix() = %q, %v; want %q", prefix, err, tc.wantPrefix)
			}
			if tc.wantVethRef != "" && tc.ids.hostVethName() != tc.wantVethRef {
				t.Errorf("hostVethName() = %q, want %q", tc.ids.hostVethName(), tc.wantVethRef)
			}
			if v := tc.ids.hostVethName(); len(v) > 15 {
				t.Errorf("veth name %q is longer than IFNAMSIZ-1", v)
			}
		})
	}
	t.Run("interface prefix", func(t *testing.T) {
		// From the invocation's environment: the process's own, or the
		// one a plugin forwarded to the agent.
		for name, h := range map[string]*host{
			"process": {},
			"forwarded": {env: func(k string) string {
				if k == "FELIX_INTERFACEPREFIX" {
					return "eni,veth,foo"
				}
				return ""
			}},
		} {
			if name == "process" {
				t.Setenv("FELIX_INTERFACEPREFIX", "eni,veth,foo")
			}
			inv := &invocation{host: h, args: &skel.CmdArgs{ContainerID: "c1", IfName: "eth0"}, k8s: &k8sArgs{namespace: "namespace", pod: "podname"}}
			if got := newWorkloadIDs(inv).hostVethName(); got != "eni82111e10a96" {
				t.Errorf("%s: hostVethName() = %q, want eni82111e10a96", name, got)
			}
		}
	})
	t.Run("matches ignores prefix neighbours", func(t *testing.T) {
		ids := workloadIDs{orchestrator: "k8s", node: "node1", pod: "web"}
		other := &api.WorkloadEndpoint{Spec: api.WorkloadEndpointSpec{Orchestrator: "k8s", Node: "node1", Pod: "web-1"}}
		same := &api.WorkloadEndpoint{Spec: api.WorkloadEndpointSpec{Orchestrator: "k8s", Node: "node1", Pod: "web"}}
		if ids.matches(other) || !ids.matches(same) {
			t.Error("endpoint matching must compare the pod, not a name prefix")
		}
	})
}

func TestProfileName(t *testing.T) {
	for in, want := range map[string]string{
		"k8s-pod-network": "k8s-pod-network",
		"any_name":        "any-name",
		"Net.Work":        "net.work",
		"_x_":             "x",
	} {
		if got := profileName(in); got != want {
			t.Errorf("profileName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseCNIArgs(t *testing.T) {
	got := parseCNIArgs("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns1;K8S_POD_NAME=web-0;IP=10.0.0.5;junk")
	if got["K8S_POD_NAMESPACE"] != "ns1" || got["K8S_POD_NAME"] != "web-0" || got["IP"] != "10.0.0.5" {
		t.Errorf("parseCNIArgs = %v", got)
	}
}

func TestApplyAnnotations(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pod     podInfo
		want    ipamRequest
		wantErr string
	}{
		{
			name: "namespace pools",
			pod:  podInfo{NSAnnotations: map[string]string{annotationIPv4Pools: `["10.1.0.0/16"]`}},
			want: ipamRequest{v4Pools: []string{"10.1.0.0/16"}, num4: 1},
		},
		{
			name: "pod overrides namespace",
			pod: podInfo{
				NSAnnotations: map[string]string{annotationIPv4Pools: `["10.1.0.0/16"]`},
				Annotations:   map[string]string{annotationIPv4Pools: `["pool-b"]`, annotationIPv6Pools: `["fd00::1/64"]`},
			},
			want: ipamRequest{v4Pools: []string{"pool-b"}, v6Pools: []string{"fd00::/64"}, num4: 1},
		},
		{
			name: "families",
			pod:  podInfo{Annotations: map[string]string{annotationIPFamilies: `["IPv6"]`}},
			want: ipamRequest{num6: 1},
		},
		{
			name: "ipAddrs",
			pod:  podInfo{Annotations: map[string]string{annotationIPAddrs: `["10.1.2.3","fd00::3"]`}},
			want: ipamRequest{num4: 1, ips: []netip.Addr{netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("fd00::3")}},
		},
		{
			name:    "ipAddrs two v4",
			pod:     podInfo{Annotations: map[string]string{annotationIPAddrs: `["10.1.2.3","10.1.2.4"]`}},
			wantErr: "more than one IPv4",
		},
		{
			name:    "ipAddrs on the namespace only is ignored, bad pools are not",
			pod:     podInfo{NSAnnotations: map[string]string{annotationIPv4Pools: `10.0.0.0/8`}},
			wantErr: annotationIPv4Pools,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := ipamRequest{num4: 1}
			err := req.applyAnnotations(&tc.pod)
			if !errtest.Want(t, err, tc.wantErr) {
				return
			}
			if !slices.Equal(req.v4Pools, tc.want.v4Pools) || !slices.Equal(req.v6Pools, tc.want.v6Pools) ||
				req.num4 != tc.want.num4 || req.num6 != tc.want.num6 || !slices.Equal(req.ips, tc.want.ips) {
				t.Errorf("request %+v, want %+v", req, tc.want)
			}
		})
	}
}

func TestPodProfilesAndLabels(t *testing.T) {
	p := podInfo{Labels: map[string]string{"app": "web"}, ServiceAccount: "sa1"}
	if got := p.profiles("ns1"); !slices.Equal(got, []string{"kns.ns1", "ksa.ns1.sa1"}) {
		t.Errorf("profiles %v", got)
	}
	l := p.endpointLabels("ns1")
	if l["app"] != "web" || l[api.LabelNamespace] != "ns1" || l[api.LabelOrchestrator] != "k8s" || l[api.LabelServiceAccount] != "sa1" {
		t.Errorf("labels %v", l)
	}
	noSA := podInfo{}
	if got := noSA.profiles("ns1"); !slices.Equal(got, []string{"kns.ns1"}) {
		t.Errorf("profiles without a service account %v", got)
	}
}

func TestGatewayV6IsEUI64OfHostMAC(t *testing.T) {
	mac := HostVethMAC()
	var b [16]byte
	b[0], b[1] = 0xfe, 0x80
	b[8], b[9], b[10] = mac[0]^0x02, mac[1], mac[2]
	b[11], b[12] = 0xff, 0xfe
	b[13], b[14], b[15] = mac[3], mac[4], mac[5]
	if want := netip.AddrFrom16(b); gatewayV6() != want || want.String() != "fe80::ecee:eeff:feee:eeee" {
		t.Errorf("gatewayV6() = %s, EUI-64 of %s is %s", gatewayV6(), mac, want)
	}
}

func FuzzParseConf(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/seed/*.conf")
	for _, s := range seeds {
		if data, err := os.ReadFile(s); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(`{"name":"n","mtu":-1,"ipam":{"type":"calico-ipam","ipv4_pools":["x/1"]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parseConf(data)
		if err != nil {
			if _, ok := err.(*types.Error); !ok {
				t.Fatalf("parseConf error %v is not a CNI error", err)
			}
			return
		}
		if c.Name == "" || c.IPAMConf.Type == "" {
			t.Fatalf("accepted a config without name or ipam type: %s", data)
		}
		if m := c.mtu(); m < 68 || m > 65535 {
			t.Fatalf("accepted mtu %d", m)
		}
	})
}
