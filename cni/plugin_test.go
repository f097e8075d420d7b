package cni_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/projectcalico/calico-node/testbin"
)

var specVersions = []string{"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// exec runs the plugin the way a runtime does: env + config on stdin.
func execPlugin(t *testing.T, path, command, stdin string) (stdout []byte, exitErr error) {
	t.Helper()
	cmd := exec.Command(path)
	cmd.Env = []string{
		"CNI_COMMAND=" + command,
		"CNI_CONTAINERID=c1",
		"CNI_NETNS=/var/run/netns/none",
		"CNI_IFNAME=eth0",
		"CNI_PATH=" + filepath.Dir(path),
	}
	cmd.Stdin = bytes.NewBufferString(stdin)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	err := cmd.Run()
	return out.Bytes(), err
}

func TestVersionEverySpec(t *testing.T) {
	dir := testbin.Dir(t)
	for _, plugin := range []string{"calico", "calico-ipam"} {
		for _, v := range specVersions {
			t.Run(plugin+"/"+v, func(t *testing.T) {
				out, err := execPlugin(t, filepath.Join(dir, plugin), "VERSION", `{"cniVersion":"`+v+`"}`)
				if err != nil {
					t.Fatalf("VERSION failed: %v: %s", err, out)
				}
				var got struct {
					CNIVersion        string   `json:"cniVersion"`
					SupportedVersions []string `json:"supportedVersions"`
				}
				if err := json.Unmarshal(out, &got); err != nil {
					t.Fatalf("VERSION output is not JSON: %v: %s", err, out)
				}
				if got.CNIVersion != v {
					t.Errorf("cniVersion = %q, want %q", got.CNIVersion, v)
				}
				for _, want := range specVersions {
					if !slices.Contains(got.SupportedVersions, want) {
						t.Errorf("supportedVersions %v lacks %s", got.SupportedVersions, want)
					}
				}
			})
		}
	}
}

// libcni is how containerd and cri-o ask a plugin for its versions.
func TestVersionThroughLibcni(t *testing.T) {
	dir := testbin.Dir(t)
	cfg := libcni.NewCNIConfig([]string{dir}, nil)
	for _, plugin := range []string{"calico", "calico-ipam"} {
		info, err := cfg.GetVersionInfo(context.Background(), plugin)
		if err != nil {
			t.Fatalf("%s: GetVersionInfo: %v", plugin, err)
		}
		if got := info.SupportedVersions(); !slices.Equal(got, specVersions) {
			t.Errorf("%s supports %v, want %v", plugin, got, specVersions)
		}
	}
}

// Until ADD/DEL/CHECK land, every other command must fail loudly with a
// CNI error object, never pretend success.
func TestUnimplementedCommandsReturnCNIError(t *testing.T) {
	dir := testbin.Dir(t)
	conf := `{"cniVersion":"1.0.0","name":"k8s-pod-network","type":"calico","ipam":{"type":"calico-ipam"}}`
	for _, cmd := range []string{"ADD", "DEL", "CHECK"} {
		t.Run(cmd, func(t *testing.T) {
			out, err := execPlugin(t, filepath.Join(dir, "calico"), cmd, conf)
			if err == nil {
				t.Fatalf("%s succeeded: %s", cmd, out)
			}
			var e struct {
				CNIVersion string `json:"cniVersion"`
				Code       int    `json:"code"`
				Msg        string `json:"msg"`
			}
			if jerr := json.Unmarshal(out, &e); jerr != nil {
				t.Fatalf("stdout is not a CNI error object: %v: %q", jerr, out)
			}
			if e.Code != 999 || !strings.Contains(e.Msg, cmd+" is not implemented") {
				t.Errorf("error object %+v: want code 999 (internal) and a message naming %s", e, cmd)
			}
		})
	}
	t.Run("bad-json", func(t *testing.T) {
		out, _ := execPlugin(t, filepath.Join(dir, "calico"), "ADD", "{not json")
		var e struct{ Code int }
		if err := json.Unmarshal(out, &e); err != nil || e.Code != 6 {
			t.Errorf("malformed config: want CNI error code 6, got %q", out)
		}
	})
	t.Run("unsupported-version", func(t *testing.T) {
		out, err := execPlugin(t, filepath.Join(dir, "calico"), "VERSION", `{"cniVersion":"9.9.9"}`)
		var e struct{ Code int }
		if err == nil || json.Unmarshal(out, &e) != nil || e.Code != 1 {
			t.Errorf("VERSION for 9.9.9: want CNI error code 1 (incompatible version), got %q (%v)", out, err)
		}
	})
	t.Run("bad-command", func(t *testing.T) {
		out, err := execPlugin(t, filepath.Join(dir, "calico"), "FROB", conf)
		var e struct{ Code int }
		if err == nil || json.Unmarshal(out, &e) != nil || e.Code != 4 {
			t.Errorf("unknown CNI_COMMAND: want CNI error code 4, got %q (%v)", out, err)
		}
	})
}
