package cni_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/projectcalico/calico-node/internal/testkit/testbin"
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
