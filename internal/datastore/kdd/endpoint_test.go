package kdd

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
)

func TestEndpointNameParsing(t *testing.T) {
	for _, tc := range []struct {
		name, pod string
		ok        bool
	}{
		{"node1-k8s-web--0-eth0", "web-0", true},
		{"node--1-k8s-a----b-eth0", "a--b", true},
		{"node1-k8s-web-eth0", "web", true},
		{"node1-cni-abc123-eth0", "", false},
		{"node1-k8s-web", "", false},
		{"node1-k8s-web--0-eth0-x", "", false},
	} {
		pod, ok := endpointPod(tc.name)
		if pod != tc.pod || ok != tc.ok {
			t.Errorf("endpointPod(%q) = %q, %v; want %q, %v", tc.name, pod, ok, tc.pod, tc.ok)
		}
	}
	for _, tc := range []struct {
		prefix, pod string
		ok          bool
	}{
		{"node1-k8s-web--0-", "web-0", true},
		{"node--1-k8s-web-", "web", true},
		{"node1-k8s-web--", "", false}, // ends inside the pod's name
		{"node1-k8s-web", "", false},   // no separator: "web..." could go on
		{"node1-k8s-", "", false},      // a node's endpoints: no one pod
		{"node1-cni-abc-", "", false},
		{"node1-k8s-web--0-eth", "", false},
	} {
		pod, ok := endpointPrefixPod(tc.prefix)
		if pod != tc.pod || ok != tc.ok {
			t.Errorf("endpointPrefixPod(%q) = %q, %v; want %q, %v", tc.prefix, pod, ok, tc.pod, tc.ok)
		}
	}
}

// pod builds a pod from JSON fragments of its spec, status and metadata.
func pod(t *testing.T, metadata, spec, status string) json.RawMessage {
	t.Helper()
	raw := `{"metadata":{"name":"web-0","namespace":"demo","uid":"8ec3ed46-6b32-494f-8ddd-096829517880","resourceVersion":"7"` + metadata +
		`},"spec":{"serviceAccountName":"web-sa","containers":[{"name":"c"}]` + spec + `},"status":{` + status + `}}`
	if !json.Valid([]byte(raw)) {
		t.Fatalf("bad test pod %s", raw)
	}
	return json.RawMessage(raw)
}

// TestPodEndpointRules: which pods have an endpoint and which addresses it
// shows, as Calico decides.
func TestPodEndpointRules(t *testing.T) {
	m := &endpointMapper{vethPrefix: "cali"}
	const node = `,"nodeName":"node1"`
	for _, tc := range []struct {
		name    string
		pod     json.RawMessage
		none    bool
		ipNets  []string
		labels  map[string]string
		checkEP func(t *testing.T, ep *api.WorkloadEndpoint)
	}{
		{name: "unscheduled pod: none", pod: pod(t, ``, ``, ``), none: true},
		{name: "host-network pod: none", pod: pod(t, ``, node+`,"hostNetwork":true`, ``), none: true},
		{name: "scheduled pod without addresses: endpoint without ipNetworks", pod: pod(t, ``, node, ``)},
		{name: "annotations give the addresses", ipNets: []string{"10.0.0.5/32", "fd00::5/128"},
			pod: pod(t, `,"annotations":{"cni.projectcalico.org/podIP":"10.0.0.5/32","cni.projectcalico.org/podIPs":"10.0.0.5/32,fd00::5/128"}`, node, ``)},
		{name: "the singular annotation, a bare address", ipNets: []string{"10.0.0.5/32"},
			pod: pod(t, `,"annotations":{"cni.projectcalico.org/podIP":"10.0.0.5"}`, node, ``)},
		{name: "pod status wins over the annotations", ipNets: []string{"10.0.0.9/32"},
			pod: pod(t, `,"annotations":{"cni.projectcalico.org/podIPs":"10.0.0.5/32"}`, node, `"podIP":"10.0.0.9","podIPs":[{"ip":"10.0.0.9"}]`)},
		{name: "finished pod has no addresses",
			pod: pod(t, `,"annotations":{"cni.projectcalico.org/podIPs":"10.0.0.5/32"}`, node, `"phase":"Succeeded","podIP":"10.0.0.5"`)},
		{name: "terminating pod keeps its addresses until DEL", ipNets: []string{"10.0.0.5/32"},
			pod: pod(t, `,"deletionTimestamp":"2026-01-01T00:00:00Z","annotations":{"cni.projectcalico.org/podIPs":"10.0.0.5/32"}`, node, `"podIP":"10.0.0.5"`)},
		{name: "terminating pod after DEL has none",
			pod: pod(t, `,"deletionTimestamp":"2026-01-01T00:00:00Z","annotations":{"cni.projectcalico.org/podIP":""}`, node, `"podIP":"10.0.0.5"`)},
		{name: "a service account name too long for a label is no label",
			pod:    pod(t, ``, node+`,"serviceAccountName":"`+strings.Repeat("s", 63)+`"`, ``),
			labels: map[string]string{api.LabelNamespace: "demo", api.LabelOrchestrator: "k8s"}},
		{name: "ports: named or host-mapped only, init containers too, protocols mapped",
			pod: pod(t, ``, node+`,"containers":[{"name":"c","ports":[{"containerPort":80},{"containerPort":53,"name":"dns","protocol":"UDP"},{"containerPort":9,"hostPort":9009,"hostIP":"10.1.1.1","protocol":"SCTP"}]}],`+
				`"initContainers":[{"name":"i","ports":[{"containerPort":81,"name":"init"}]}]`, ``),
			checkEP: func(t *testing.T, ep *api.WorkloadEndpoint) {
				want := []api.WorkloadEndpointPort{
					{Name: "dns", Protocol: api.ProtocolFromString("UDP"), Port: 53},
					{Protocol: api.ProtocolFromString("SCTP"), Port: 9, HostPort: 9009, HostIP: "10.1.1.1"},
					{Name: "init", Protocol: api.ProtocolFromString("TCP"), Port: 81},
				}
				if !reflect.DeepEqual(ep.Spec.Ports, want) {
					t.Errorf("ports = %+v, want %+v", ep.Spec.Ports, want)
				}
			}},
		{name: "floating IPs and spoofing prefixes", ipNets: []string{"10.0.0.5/32"},
			pod: pod(t, `,"annotations":{"cni.projectcalico.org/podIP":"10.0.0.5/32","cni.projectcalico.org/floatingIPs":"[\"192.0.2.7\",\"2001:db8::7\"]","cni.projectcalico.org/allowedSourcePrefixes":"[\"10.9.9.9/24\"]"}`, node, ``),
			checkEP: func(t *testing.T, ep *api.WorkloadEndpoint) {
				if want := []api.IPNAT{{InternalIP: "10.0.0.5", ExternalIP: "192.0.2.7"}}; !reflect.DeepEqual(ep.Spec.IPNATs, want) {
					t.Errorf("ipNATs = %+v, want %+v", ep.Spec.IPNATs, want)
				}
				if want := []string{"10.9.9.0/24"}; !reflect.DeepEqual(ep.Spec.AllowSpoofedSourcePrefixes, want) {
					t.Errorf("allowSpoofedSourcePrefixes = %v, want %v", ep.Spec.AllowSpoofedSourcePrefixes, want)
				}
			}},
		{name: "QoS annotations", pod: pod(t, `,"annotations":{"kubernetes.io/ingress-bandwidth":"10M","qos.projectcalico.org/egressPacketRate":"100","qos.projectcalico.org/dscp":"AF11"}`, node, ``),
			checkEP: func(t *testing.T, ep *api.WorkloadEndpoint) {
				q := ep.Spec.QoSControls
				if q == nil || q.IngressBandwidth != 10_000_000 || q.IngressBurst != 4<<30 || q.EgressPacketRate != 100 || q.EgressPacketBurst != 5 ||
					q.DSCP == nil || q.DSCP.String() != "AF11" {
					t.Errorf("qosControls = %+v", q)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := m.convert(0, tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			if tc.none {
				if len(objs) != 0 {
					t.Fatalf("got endpoints %v, want none", objs)
				}
				return
			}
			if len(objs) != 1 {
				t.Fatalf("got %d endpoints, want 1", len(objs))
			}
			ep := objs[0].(*api.WorkloadEndpoint)
			if ep.Name != "node1-k8s-web--0-eth0" || ep.Spec.InterfaceName != "cali50aeaf5a85d" {
				t.Errorf("name %s, interface %s", ep.Name, ep.Spec.InterfaceName)
			}
			if !reflect.DeepEqual(ep.Spec.IPNetworks, tc.ipNets) {
				t.Errorf("ipNetworks = %v, want %v", ep.Spec.IPNetworks, tc.ipNets)
			}
			if tc.labels != nil && !reflect.DeepEqual(ep.Labels, tc.labels) {
				t.Errorf("labels = %v, want %v", ep.Labels, tc.labels)
			}
			if tc.checkEP != nil {
				tc.checkEP(t, ep)
			}
		})
	}
}

// TestPodQoSControls: out-of-range values are clamped and settings that
// lack what they need are dropped, as Calico does.
func TestPodQoSControls(t *testing.T) {
	for _, tc := range []struct {
		name string
		anns map[string]string
		want *api.QoSControls
		err  bool
	}{
		{name: "none", anns: map[string]string{}, want: nil},
		{name: "calico overrides kubernetes",
			anns: map[string]string{qosAnnK8sEgressBandwidth: "1M", qosAnnEgressBandwidth: "2M", qosAnnEgressBurst: "3M"},
			want: &api.QoSControls{EgressBandwidth: 2_000_000, EgressBurst: 3_000_000}},
		{name: "too small is clamped", anns: map[string]string{qosAnnIngressBandwidth: "10"},
			want: &api.QoSControls{IngressBandwidth: 1_000, IngressBurst: 4 << 30}, err: true},
		{name: "burst without bandwidth is dropped", anns: map[string]string{qosAnnIngressBurst: "5M"}, want: nil, err: true},
		{name: "peakrate must exceed bandwidth", anns: map[string]string{qosAnnIngressBandwidth: "5M", qosAnnIngressPeakrate: "4M"},
			want: &api.QoSControls{IngressBandwidth: 5_000_000, IngressBurst: 4 << 30}, err: true},
		{name: "bad DSCP", anns: map[string]string{qosAnnEgressDSCP: "64"}, want: nil, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := podQoSControls(tc.anns)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if (err != nil) != tc.err {
				t.Errorf("err = %v, want error %v", err, tc.err)
			}
		})
	}
}
