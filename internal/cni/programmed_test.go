package cni

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/projectcalico/calico-node/agent/epstatus"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// fakeDataplane is an agent's tracker: Wait answers err.
type fakeDataplane struct {
	node   string
	err    error
	waited []string
}

func (f *fakeDataplane) Node() string                                                { return f.node }
func (f *fakeDataplane) ADDReceived(epstatus.Key, string, string, time.Time)         {}
func (f *fakeDataplane) ADDProgress(epstatus.Key, string, epstatus.Stage, time.Time) {}
func (f *fakeDataplane) ADDWritten(*api.WorkloadEndpoint, time.Time)                 {}
func (f *fakeDataplane) ADDFailed(epstatus.Key, string, error)                       {}
func (f *fakeDataplane) Wait(ctx context.Context, ns, name, rev string) error {
	f.waited = append(f.waited, ns+"/"+name+"@"+rev)
	if f.err != nil {
		<-ctx.Done()
		return f.err
	}
	return nil
}

// Whether and on what ADD waits for the dataplane, and what it says
// when it gives up.
func TestWaitProgrammed(t *testing.T) {
	ep := &api.WorkloadEndpoint{
		ObjectMeta: api.ObjectMeta{Namespace: "default", Name: "n1-k8s-web-eth0", ResourceVersion: "12"},
		Spec:       api.WorkloadEndpointSpec{Node: "n1", Orchestrator: api.OrchestratorKubernetes, Pod: "web", Endpoint: "eth0", ContainerID: "c1"},
	}
	secs := func(f float64) *float64 { return &f }
	const (
		noMarker = iota
		markerN1
		markerN2
	)
	for _, tc := range []struct {
		name    string
		timeout *float64 // policy_setup_timeout_seconds
		marker  int
		file    string // the endpoint's status file content; "-": none
		dp      *fakeDataplane
		agentTO time.Duration // the agent's default
		wantErr string        // "" : ADD goes on
	}{
		{name: "plugin, no agent on the node: no wait", file: "-"},
		{name: "plugin, another node's agent: no wait", marker: markerN2, file: "-"},
		{name: "plugin, agent marked, programmed", marker: markerN1, file: `{"containerID":"c1","revision":"12"}`},
		{name: "plugin, felix's empty file", marker: markerN1, file: ""},
		{name: "plugin, agent marked, not programmed", marker: markerN1, file: "-", timeout: secs(0.05), wantErr: "no status file"},
		{name: "plugin, older revision programmed", marker: markerN1, file: `{"containerID":"c1","revision":"11"}`, timeout: secs(0.05), wantErr: "revision 12"},
		{name: "plugin, timeout set, no agent: waits", file: "-", timeout: secs(0.05), wantErr: "no calico-node agent has marked"},
		{name: "plugin, timeout 0: never waits", marker: markerN1, file: "-", timeout: secs(0)},
		{name: "agent, programmed", dp: &fakeDataplane{node: "n1"}},
		{name: "agent, not programmed", dp: &fakeDataplane{node: "n1", err: &epstatus.NotProgrammedError{Node: "n1", Endpoint: "default/n1-k8s-web-eth0", Revision: 12, Missing: "its policy is not programmed"}},
			timeout: secs(0.05), wantErr: "has not programmed workload endpoint default/n1-k8s-web-eth0 (revision 12): its policy is not programmed"},
		{name: "agent, default off by the agent", dp: &fakeDataplane{node: "n1", err: errors.New("waited")}, agentTO: -1},
		{name: "agent of another node: no wait", dp: &fakeDataplane{node: "n2", err: errors.New("waited")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "endpoint-status")
			os.MkdirAll(dir, 0o755)
			switch tc.marker {
			case markerN1:
				os.WriteFile(filepath.Join(dir, epstatus.MarkerName), []byte(`{"node":"n1"}`), 0o644)
			case markerN2:
				os.WriteFile(filepath.Join(dir, epstatus.MarkerName), []byte(`{"node":"n2"}`), 0o644)
			}
			if tc.file != "-" {
				os.WriteFile(filepath.Join(dir, epstatus.FileName(ep)), []byte(tc.file), 0o644)
			}
			h := &host{policyTimeout: tc.agentTO}
			if tc.dp != nil {
				h.dataplane = tc.dp
			}
			inv := &invocation{host: h, args: &skel.CmdArgs{ContainerID: "c1"}, logger: slog.New(slog.DiscardHandler),
				conf: &netConf{PolicySetupTimeoutSeconds: tc.timeout, EndpointStatusDir: dir}}
			start := time.Now()
			err := inv.waitProgrammed(context.Background(), ep)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("waitProgrammed: %v", err)
				}
				if time.Since(start) > time.Second {
					t.Errorf("took %v", time.Since(start))
				}
				return
			}
			var e *types.Error
			if !errors.As(err, &e) || e.Code != types.ErrTryAgainLater || !strings.Contains(e.Msg, tc.wantErr) ||
				!strings.Contains(e.Msg, "not programmed within 50ms") || !strings.Contains(e.Details, "policy_setup_timeout_seconds") {
				t.Fatalf("waitProgrammed = %#v, want code 11 saying %q", err, tc.wantErr)
			}
		})
	}
}

// The status file appearing ends the wait at once.
func TestWaitProgrammedFileAppears(t *testing.T) {
	ep := &api.WorkloadEndpoint{
		ObjectMeta: api.ObjectMeta{Namespace: "default", Name: "n1-k8s-web-eth0", ResourceVersion: "12"},
		Spec:       api.WorkloadEndpointSpec{Node: "n1", Orchestrator: api.OrchestratorKubernetes, Pod: "web", Endpoint: "eth0"},
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, epstatus.MarkerName), []byte(`{"node":"n1"}`), 0o644)
	inv := &invocation{host: &host{}, args: &skel.CmdArgs{}, logger: slog.New(slog.DiscardHandler), conf: &netConf{EndpointStatusDir: dir}}
	go func() {
		time.Sleep(100 * time.Millisecond)
		os.WriteFile(filepath.Join(dir, epstatus.FileName(ep)), []byte(`{"revision":"12"}`), 0o644)
	}()
	start := time.Now()
	if err := inv.waitProgrammed(context.Background(), ep); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 100*time.Millisecond || took > 2*time.Second {
		t.Errorf("waited %v for a file written after 100ms", took)
	}
}

func TestPolicySetupTimeoutConfig(t *testing.T) {
	for _, tc := range []struct {
		conf    string
		wantErr bool
	}{
		{`"policy_setup_timeout_seconds": 10`, false},
		{`"policy_setup_timeout_seconds": 0`, false},
		{`"policy_setup_timeout_seconds": 2.5`, false},
		{`"policy_setup_timeout_seconds": -1`, true},
		{`"policy_setup_timeout_seconds": "5"`, true},
	} {
		_, err := parseConf([]byte(`{"name": "n", "type": "calico", "cniVersion": "1.0.0", "nodename": "x", "ipam": {"type": "calico-ipam"}, ` + tc.conf + `}`))
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err = %v", tc.conf, err)
		}
		if err != nil && !strings.Contains(err.Error(), "policy_setup_timeout_seconds") {
			t.Errorf("%s: the error does not name the field: %v", tc.conf, err)
		}
	}
}
