package cni_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/vishvananda/netlink"

	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
)

// hookIPAM installs an IPAM plugin "hook-ipam" that runs script before
// handing an ADD to host-local: a deterministic point in the middle of the
// calico plugin's ADD (after the addresses, before the veth and the
// endpoint).
func (e *env) hookIPAM(script string) map[string]any {
	e.t.Helper()
	path := filepath.Join(e.binDir, "hook-ipam")
	body := "#!/bin/sh\nif [ \"$CNI_COMMAND\" = ADD ]; then\n" + script + "\nfi\nexec " + filepath.Join(e.binDir, "host-local") + "\n"
	if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
		e.t.Fatal(err)
	}
	ipam := e.hostLocal("10.98.0.0/24")
	ipam["type"] = "hook-ipam"
	return ipam
}

func TestAddFailuresLeaveNothing(t *testing.T) {
	e := newEnv(t)
	e.addPool("v4", "10.244.0.0/16", 26)

	t.Run("netns missing", func(t *testing.T) {
		e := e.in(t)
		p := newPod(t)
		p.rt.NetNS = "/var/run/netns/no-such-pod-ns"
		before := kubetest.CaliLinks(t)
		_, err := e.add(e.conf("1.0.0", nil), p)
		if code, msg := cniCode(err); code != types.ErrUnknownContainer || !strings.Contains(msg, p.rt.NetNS) {
			t.Errorf("ADD into a missing netns: %v, want code 3 naming it", err)
		}
		e.assertNothingLeft("k8s-pod-network", p, "cali"+p.rt.ContainerID)
		if after := kubetest.CaliLinks(t); !slices.Equal(before, after) {
			t.Errorf("node interfaces changed: %v -> %v", before, after)
		}
	})

	t.Run("netns path is no namespace", func(t *testing.T) {
		e := e.in(t)
		p := newPod(t)
		p.rt.NetNS = filepath.Join(t.TempDir(), "plain-file")
		os.WriteFile(p.rt.NetNS, nil, 0o644)
		_, err := e.add(e.conf("1.0.0", nil), p)
		if code, _ := cniCode(err); code != types.ErrInvalidNetNS {
			t.Errorf("ADD into a plain file: %v, want code 8", err)
		}
		e.assertNothingLeft("k8s-pod-network", p, "cali"+p.rt.ContainerID)
	})

	t.Run("netns vanishes during ADD", func(t *testing.T) {
		e := e.in(t)
		p := newPod(t)
		conf := e.conf("1.0.0", map[string]any{"ipam": e.hookIPAM("ip netns delete " + p.name)})
		_, err := e.add(conf, p)
		if code, msg := cniCode(err); code != types.ErrUnknownContainer || !strings.Contains(msg, "disappeared") {
			t.Errorf("ADD whose netns was deleted half-way: %v, want code 3 (netns disappeared)", err)
		}
		e.assertNothingLeft("k8s-pod-network", p, "cali"+p.rt.ContainerID)
		// The runtime's DEL for the failed ADD finds nothing and succeeds.
		e.mustDel(conf, p)
	})

	t.Run("etcd stops during ADD", func(t *testing.T) {
		e := e.in(t)
		dir := t.TempDir()
		req, ack := filepath.Join(dir, "req"), filepath.Join(dir, "ack")
		for _, f := range []string{req, ack} {
			if err := syscall.Mkfifo(f, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		conf := e.conf("1.0.0", map[string]any{"ipam": e.hookIPAM("echo stop > " + req + "; read x < " + ack)})
		go func() {
			// Runs when the hook asks: stop etcd, then let the ADD go on.
			if _, err := os.ReadFile(req); err == nil {
				e.etcd.Stop()
			}
			os.WriteFile(ack, []byte("go\n"), 0o600)
		}()
		p := newPod(t)
		start := time.Now()
		_, err := e.add(conf, p)
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("ADD took %v to notice that etcd is gone", took)
		}
		if code, _ := cniCode(err); code != types.ErrTryAgainLater {
			t.Errorf("ADD with etcd gone half-way: %v, want code 11", err)
		}
		if _, lerr := netlink.LinkByName("cali" + p.rt.ContainerID); lerr == nil {
			t.Error("host veth left behind")
		}
		e.etcd.Restart(t)
		e.reconnect()
		e.assertNothingLeft("k8s-pod-network", p, "cali"+p.rt.ContainerID)
	})

	t.Run("etcd down before ADD", func(t *testing.T) {
		e := e.in(t)
		e.etcd.Stop()
		p := newPod(t)
		_, err := e.add(e.conf("1.0.0", nil), p)
		if code, _ := cniCode(err); code != types.ErrTryAgainLater {
			t.Errorf("ADD with etcd down: %v, want code 11", err)
		}
		e.etcd.Restart(t)
		e.reconnect()
		e.assertNothingLeft("k8s-pod-network", p, "cali"+p.rt.ContainerID)
	})

	t.Run("pod interface name taken", func(t *testing.T) {
		e := e.in(t)
		p := newPod(t)
		inPod(t, p, func() error {
			attrs := netlink.NewLinkAttrs()
			attrs.Name = "eth0"
			return netlink.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "other0"})
		})
		_, err := e.add(e.conf("1.0.0", nil), p)
		if err == nil || !strings.Contains(err.Error(), "eth0 already exists") {
			t.Errorf("ADD with eth0 taken: %v, want an error naming eth0", err)
		}
		// The address allocated before the veth failed is released.
		e.assertNothingLeft("k8s-pod-network", p, "cali"+p.rt.ContainerID)
	})
}

// runPlugin executes the plugin binary directly, as a runtime would, with
// the given environment; it returns stdout.
func runPlugin(t *testing.T, path string, env map[string]string, stdin string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(path)
	for k, v := range env {
		if v != "" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Stdin = strings.NewReader(stdin)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	if stderr.Len() > 0 && testing.Verbose() {
		t.Logf("plugin stderr: %s", stderr.String())
	}
	return out.Bytes(), err
}

func TestInvalidInputs(t *testing.T) {
	e := newEnv(t)
	e.addPool("v4", "10.244.0.0/16", 26)
	p := newPod(t)
	good := func() map[string]any {
		var m map[string]any
		json.Unmarshal(e.conf("1.0.0", nil), &m)
		return m
	}
	with := func(k string, v any) string {
		m := good()
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		data, _ := json.Marshal(m)
		return string(data)
	}
	goodConf := with("log_level", "info")
	withKubeconfig := func(path string) string {
		m := good()
		m["datastore_type"] = "kubernetes"
		m["kubernetes"] = map[string]any{"kubeconfig": path}
		data, _ := json.Marshal(m)
		return string(data)
	}
	baseEnv := func() map[string]string {
		return map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": p.rt.ContainerID, "CNI_NETNS": p.ns.Path(),
			"CNI_IFNAME": "eth0", "CNI_PATH": e.binDir}
	}
	for _, tc := range []struct {
		name  string
		conf  string
		env   map[string]string // overrides
		code  uint
		names string // the message must name it
	}{
		{"bad JSON", `{"cniVersion":"1.0.0","name":`, nil, types.ErrDecodingFailure, ""},
		{"missing name", with("name", nil), nil, types.ErrInvalidNetworkConfig, "name"},
		{"missing ipam", with("ipam", nil), nil, types.ErrInvalidNetworkConfig, "ipam"},
		{"bad mtu", with("mtu", 10), nil, types.ErrInvalidNetworkConfig, "mtu"},
		{"mtu of the wrong type", with("mtu", "jumbo"), nil, types.ErrInvalidNetworkConfig, "mtu"},
		{"bad etcd endpoint", with("etcd_endpoints", "etcd.example:2379"), nil, types.ErrInvalidNetworkConfig, "etcd_endpoints"},
		{"unreachable etcd", with("etcd_endpoints", "http://127.0.0.1:9"), nil, types.ErrTryAgainLater, "127.0.0.1:9"},
		{"missing etcd CA file", with("etcd_ca_cert_file", "/nonexistent/ca.pem"), nil, types.ErrInvalidNetworkConfig, "etcd_ca_cert_file"},
		{"kubernetes datastore with a missing kubeconfig", withKubeconfig("/nonexistent/kubeconfig"), nil, types.ErrInvalidNetworkConfig, "/nonexistent/kubeconfig"},
		{"unknown DATASTORE_TYPE", goodConf, map[string]string{"DATASTORE_TYPE": "consul"}, types.ErrInvalidNetworkConfig, "DATASTORE_TYPE"},
		{"unknown datastore", with("datastore_type", "consul"), nil, types.ErrInvalidNetworkConfig, "datastore_type"},
		{"bad pool", with("ipam", map[string]any{"type": "calico-ipam", "ipv4_pools": []string{"10.0.0.0/33"}}), nil, types.ErrInvalidNetworkConfig, "ipam.ipv4_pools"},
		{"unknown pool", with("ipam", map[string]any{"type": "calico-ipam", "ipv4_pools": []string{"no-such-pool"}}), nil, types.ErrInvalidNetworkConfig, "no-such-pool"},
		{"missing IPAM plugin", with("ipam", map[string]any{"type": "no-such-ipam"}), nil, types.ErrInternal, "no-such-ipam"},
		{"unsupported cniVersion", with("cniVersion", "9.9.9"), nil, types.ErrIncompatibleCNIVersion, ""},
		{"missing CNI_NETNS", goodConf, map[string]string{"CNI_NETNS": ""}, types.ErrInvalidEnvironmentVariables, "CNI_NETNS"},
		{"missing CNI_IFNAME", goodConf, map[string]string{"CNI_IFNAME": ""}, types.ErrInvalidEnvironmentVariables, "CNI_IFNAME"},
		{"missing CNI_CONTAINERID", goodConf, map[string]string{"CNI_CONTAINERID": ""}, types.ErrInvalidEnvironmentVariables, "CNI_CONTAINERID"},
		{"missing CNI_PATH", goodConf, map[string]string{"CNI_PATH": ""}, types.ErrInvalidEnvironmentVariables, "CNI_PATH"},
		{"unknown command", goodConf, map[string]string{"CNI_COMMAND": "FROB"}, types.ErrInvalidEnvironmentVariables, "FROB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.in(t)
			env := baseEnv()
			for k, v := range tc.env {
				env[k] = v
			}
			before := kubetest.CaliLinks(t)
			out, err := runPlugin(t, filepath.Join(e.binDir, "calico"), env, tc.conf)
			if err == nil {
				t.Fatalf("plugin succeeded: %s", out)
			}
			var got struct {
				Code uint   `json:"code"`
				Msg  string `json:"msg"`
			}
			if jerr := json.Unmarshal(out, &got); jerr != nil {
				t.Fatalf("stdout is not a CNI error: %v: %q", jerr, out)
			}
			if got.Code != tc.code || !strings.Contains(got.Msg, tc.names) {
				t.Errorf("error %+v, want code %d naming %q", got, tc.code, tc.names)
			}
			if after := kubetest.CaliLinks(t); !slices.Equal(before, after) {
				t.Errorf("node interfaces changed: %v -> %v", before, after)
			}
			e.assertNothingLeft("k8s-pod-network", p, "cali"+p.rt.ContainerID)
		})
	}
	// And the same config, corrected, works: the failures above were about
	// the inputs, not the environment.
	out, err := runPlugin(t, filepath.Join(e.binDir, "calico"), baseEnv(), goodConf)
	if err != nil {
		t.Fatalf("ADD with the good config: %v: %s", err, out)
	}
	env := baseEnv()
	env["CNI_COMMAND"] = "DEL"
	if out, err := runPlugin(t, filepath.Join(e.binDir, "calico"), env, goodConf); err != nil {
		t.Fatalf("DEL: %v: %s", err, out)
	}
}
