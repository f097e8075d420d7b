package epstatus

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestWriteTimeline(t *testing.T) {
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	ms := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Millisecond))) }
	home := Record{Node: "node-1", EndpointNode: "node-1", Namespace: "frontend", Endpoint: "node--1-k8s-pod--1-eth0", Pod: "pod-1",
		ContainerID: "c1", Revision: "42", Addresses: []string{"198.51.100.3/32"},
		Stages: []StageTime{{StageADDReceived, ms(0)}, {StageIPAM, ms(3.2)}, {StageVeth, ms(4)}, {StageEndpointWritten, ms(6)},
			{StageAgentSeen, ms(7)}, {StageRoutes, ms(9)}, {StagePolicy, ms(31.25)}, {StageADDReturned, ms(32)}}}
	older := home
	older.ContainerID, older.Stages = "c0", []StageTime{{StageADDReceived, t0.Add(-time.Hour)}}
	remote := Record{Node: "node-2", EndpointNode: "node-1", Namespace: "frontend", Endpoint: home.Endpoint, Pod: "pod-1", ContainerID: "c1",
		Stages: []StageTime{{StageAgentSeen, ms(8)}, {StageRemoteProgrammed, ms(40)}}}
	staleRemote := remote
	staleRemote.Node, staleRemote.ContainerID = "node-3", "c0"
	sources := []Source{
		{Socket: "/run/n3.sock", Answer: &Answer{Node: "node-3", Records: []Record{staleRemote}}},
		{Socket: "/run/n2.sock", Answer: &Answer{Node: "node-2", BGP: true, Records: []Record{remote}}},
		{Socket: "/run/n1.sock", Answer: &Answer{Node: "node-1", BGP: false, Records: []Record{older, home}}},
		{Socket: "/run/n4.sock", Err: errors.New("no calico-node agent answers")},
	}
	var b strings.Builder
	if err := WriteTimeline(&b, "frontend", "pod-1", sources); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Logf("calicoctl node timeline frontend/pod-1:\n%s", out)
	// Rows in the stages' order, each with its offset from ADD received.
	wantRows := [][]string{
		{"ADD received", "0s"}, {"IPAM done", "3.2ms"}, {"veth up", "4ms"}, {"endpoint written", "6ms"},
		{"seen by the agent", "7ms"}, {"policy programmed", "31.3ms"}, {"routes programmed", "9ms"},
		{"route advertised (BGP)", "no BGP on this node"}, {"ADD returned", "32ms"},
		{"programmed on /run/n4.sock", "not reachable: no calico-node agent answers"},
		{"programmed on node-2", "40ms"}, {"programmed on node-3", "no record on that node"},
	}
	lines := strings.Split(out, "\n")
	at := 0
	for _, want := range wantRows {
		found := false
		for ; at < len(lines); at++ {
			if strings.HasPrefix(lines[at], want[0]) && strings.Contains(lines[at], want[1]) {
				found = true
				break
			}
		}
		if !found {
			t.Fatalf("no row %q with %q (in this order):\n%s", want[0], want[1], out)
		}
	}
	for _, want := range []string{"Endpoint frontend/pod-1: workload endpoint node--1-k8s-pod--1-eth0 on node node-1", "container c1, revision 42, addresses 198.51.100.3/32", "2025-01-02T03:04:05.031250Z"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// An ADD that ran in the plugin process: the agent saw the endpoint, the
// ADD's own stages are not known.
func TestWriteTimelinePluginADD(t *testing.T) {
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	r := Record{Node: "n", EndpointNode: "n", Namespace: "default", Endpoint: "n-k8s-a-eth0", Pod: "a", ContainerID: "c",
		Stages: []StageTime{{StageAgentSeen, t0}, {StagePolicy, t0.Add(time.Millisecond)}}}
	var b strings.Builder
	if err := WriteTimeline(&b, "default", "a", []Source{{Socket: "s", Answer: &Answer{Node: "n", BGP: true, Records: []Record{r}}}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ADD received", "not recorded: the ADD did not run in the agent", "routes programmed", "not yet"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}

func TestWriteTimelineNothing(t *testing.T) {
	var b strings.Builder
	err := WriteTimeline(&b, "default", "a", []Source{{Socket: "/x.sock", Err: errors.New("refused")}, {Socket: "s", Answer: &Answer{Node: "n"}}})
	if !errors.Is(err, ErrNoTimeline) {
		t.Fatalf("err = %v, want ErrNoTimeline", err)
	}
	if !strings.Contains(b.String(), "/x.sock: refused") {
		t.Errorf("the unreachable agent is not reported:\n%s", b.String())
	}
}
