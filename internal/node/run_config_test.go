package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
	"github.com/projectcalico/calico-node/internal/testkit/proctest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

// fullNode is a `calico-node run` with every actor on: embedded etcd,
// BGP, the dataplane, the CNI server and install-cni. It runs in a
// namespace of its own, so that what it would do to the kernel (iptables,
// routes, a BGP listener) stays there, with every file under a temporary
// directory.
type fullNode struct {
	ns                            *netnstest.NS
	data, conf, bin               string
	cniSocket, bgpSocket, missing string
}

func newFullNode(t *testing.T) *fullNode {
	dir := t.TempDir()
	return &fullNode{
		ns:   netnstest.New(t, "cfgerr"),
		data: filepath.Join(dir, "data"), conf: filepath.Join(dir, "net.d"), bin: filepath.Join(dir, "bin"),
		cniSocket: filepath.Join(dir, "cni.sock"), bgpSocket: filepath.Join(dir, "bird.ctl"),
		missing: filepath.Join(dir, "no-such-file"),
	}
}

// start runs the agent with extra args and env on top of the full set.
func (n *fullNode) start(t *testing.T, args, env []string) *proctest.Proc {
	cmd := n.ns.Command(testbin.Path(t), append([]string{"run", "--data-dir", n.data}, args...)...)
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"NODENAME=cfgerr", "IP=198.51.100.30/24",
		"CALICO_NETWORKING_BACKEND=bird", "CALICO_DATAPLANE=iptables",
		"CALICO_BGP_STATUS_SOCKET=" + n.bgpSocket, "CALICO_CNI_SOCKET=" + n.cniSocket,
		"CALICO_STATUS_SOCKET=" + n.statusSocket(),
		"FELIX_ENDPOINTSTATUSPATHPREFIX=" + filepath.Dir(n.cniSocket),
		"CNI_NETWORK_CONFIG=" + `{"name": "k8s-pod-network", "cniVersion": "0.3.1", "type": "calico", "mtu": __CNI_MTU__}`,
		"CALICO_CNI_CONF_DIR=" + n.conf, "CALICO_CNI_BIN_DIR=" + n.bin,
		"CALICO_SERVICE_ACCOUNT_DIR=" + filepath.Join(n.data, "no-service-account"),
	}, env...)
	return proctest.Start(t, "calico-node", cmd)
}

// statusSocket is the agent's status socket, beside its CNI socket.
func (n *fullNode) statusSocket() string {
	return filepath.Join(filepath.Dir(n.cniSocket), "status.sock")
}

// traces lists what a started actor leaves behind: a listener's log
// line, a socket, a file, a chain in the kernel.
func (n *fullNode) traces(t *testing.T, logs string) []string {
	var found []string
	for _, line := range []string{"health server listening", "embedded etcd ready", "serving CNI commands", " stopped"} {
		if strings.Contains(logs, line) {
			found = append(found, "log: "+strings.TrimSpace(line))
		}
	}
	for _, path := range []string{
		n.cniSocket, n.bgpSocket, filepath.Join(n.data, "etcd"), filepath.Join(n.data, "nodename"),
		n.statusSocket(), filepath.Join(filepath.Dir(n.cniSocket), "endpoint-status", ".agent"),
		filepath.Join(n.conf, "10-calico.conflist"), filepath.Join(n.bin, "calico"),
	} {
		if _, err := os.Stat(path); err == nil {
			found = append(found, "file: "+path)
		}
	}
	if strings.Contains(n.ns.MustRun(t, "iptables-save"), ":cali-") {
		found = append(found, "iptables: cali- chains")
	}
	return found
}

// A configuration error stops `calico-node run` before any actor has
// started: it exits with the reason, and nothing has listened, been
// written or been programmed.
func TestConfigErrorStartsNothing(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  func(n *fullNode) []string
		want func(n *fullNode) string // in the output
	}{
		{
			name: "bad flag value",
			args: []string{"--bgp-listen-port", "70000"},
			want: func(*fullNode) string { return "bgp-listen-port 70000" },
		},
		{
			name: "bad FELIX_ setting",
			env:  func(*fullNode) []string { return []string{"FELIX_IPV6SUPPORT=maybe"} },
			want: func(*fullNode) string { return "FELIX_IPV6SUPPORT" },
		},
		{
			name: "unreadable CNI config template",
			env:  func(n *fullNode) []string { return []string{"CNI_NETWORK_CONFIG_FILE=" + n.missing} },
			want: func(n *fullNode) string { return n.missing },
		},
		{
			name: "unreadable etcd CA file",
			env:  func(n *fullNode) []string { return []string{"ETCD_CA_CERT_FILE=" + n.missing} },
			want: func(n *fullNode) string { return n.missing },
		},
		{
			name: "unreadable kubeconfig for the controllers",
			env:  func(n *fullNode) []string { return []string{"ENABLED_CONTROLLERS=node", "KUBECONFIG=" + n.missing} },
			want: func(n *fullNode) string { return n.missing },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newFullNode(t)
			var env []string
			if tc.env != nil {
				env = tc.env(n)
			}
			p := n.start(t, tc.args, env)
			select {
			case <-p.Done():
			case <-time.After(30 * time.Second):
				t.Fatalf("agent with a configuration error kept running\n%s", p.Log)
			}
			logs := p.Log.String()
			if p.Err() == nil || !strings.Contains(logs, tc.want(n)) {
				t.Errorf("exit %v, want an error naming %q; output:\n%s", p.Err(), tc.want(n), logs)
			}
			if found := n.traces(t, logs); len(found) > 0 {
				t.Errorf("actors started before the configuration error: %v\n%s", found, logs)
			}
		})
	}

	// The same node without the error leaves every trace the cases above
	// look for, so that their absence there means something.
	t.Run("valid configuration", func(t *testing.T) {
		n := newFullNode(t)
		p := n.start(t, nil, nil)
		const running = 12 // every trace but "log: stopped"
		var found []string
		p.WaitFor(t, 60*time.Second, "every actor's trace", func() bool {
			found = n.traces(t, p.Log.String())
			return len(found) == running
		})
		if err := p.Stop(15 * time.Second); err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, p.Log)
		}
		if !strings.Contains(p.Log.String(), "confwatch stopped") {
			t.Errorf("no stop logged:\n%s", p.Log)
		}
	})
}

// TestDataplaneNoneServesCNI: --dataplane=none leaves the kernel alone
// but still serves the CNI socket, which needs no dataplane (it runs what
// the plugin would run): the plugins on such a node are handed to the
// agent as on any other.
func TestDataplaneNoneServesCNI(t *testing.T) {
	n := newFullNode(t)
	p := n.start(t, nil, []string{"CALICO_DATAPLANE=none"})
	p.WaitFor(t, 60*time.Second, "the CNI socket", func() bool {
		_, err := os.Stat(n.cniSocket)
		return err == nil && strings.Contains(p.Log.String(), "serving CNI commands")
	})
	if strings.Contains(n.ns.MustRun(t, "iptables-save"), ":cali-") {
		t.Errorf("--dataplane=none programmed iptables")
	}
	// An IPAM ADD as the runtime sends it: the agent runs it (and counts
	// it served) and answers with an address of the default pool.
	served := func() float64 {
		return n.metric(t, 9099, `calico_cni_server_requests_total{reason="",result="served"}`)
	}
	before := served()
	p.WaitFor(t, 60*time.Second, "the node's registration", func() bool { return strings.Contains(p.Log.String(), "node registered") })
	pod := netnstest.New(t, "ipampod")
	out, err := n.cni(t, "calico-ipam", "ADD", "/var/run/netns/"+pod.Name, "ipam-none-1")
	if err != nil {
		t.Fatalf("calico-ipam ADD: %v\n%s\n%s", err, out, p.Log.Tail(40))
	}
	if !regexp.MustCompile(`"address":\s*"192\.168\.\d+\.\d+/\d+"`).MatchString(out) {
		t.Errorf("calico-ipam ADD result has no address of the default pool:\n%s", out)
	}
	if now := served(); now != before+1 {
		t.Errorf("served CNI requests %v after the ADD, want %v: the agent did not run it", now, before+1)
	}
	if err := p.Stop(15 * time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, p.Log)
	}
}

// cni runs the installed plugin as the runtime would, in the node's
// namespace with the network config install-cni wrote (its first plugin)
// on stdin: the plugin hands the command to the agent's socket.
func (n *fullNode) cni(t *testing.T, plugin, command, netns, containerID string) (string, error) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(n.conf, "10-calico.conflist"))
	if err != nil {
		t.Fatalf("install-cni's config: %v", err)
	}
	var list struct {
		Name       string           `json:"name"`
		CNIVersion string           `json:"cniVersion"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(raw, &list); err != nil || len(list.Plugins) == 0 {
		t.Fatalf("install-cni's config %s: %v", raw, err)
	}
	conf := list.Plugins[0]
	conf["name"], conf["cniVersion"] = list.Name, list.CNIVersion
	if conf["ipam"] == nil {
		conf["ipam"] = map[string]string{"type": "calico-ipam"} // start's template leaves it out
	}
	conf["nodename"] = "cfgerr" // start's NODENAME; the plugin would read the host's nodename file
	stdin, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	cmd := n.ns.Command(filepath.Join(n.bin, plugin))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "CNI_COMMAND=" + command, "CNI_CONTAINERID=" + containerID,
		"CNI_NETNS=" + netns, "CNI_IFNAME=eth0", "CNI_PATH=" + n.bin, "CALICO_CNI_SOCKET=" + n.cniSocket}
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// metric reads one sample from the /metrics of a port on the node's
// loopback (inside its namespace); 0 when absent.
func (n *fullNode) metric(t *testing.T, port int, sample string) float64 {
	t.Helper()
	return proctest.Sample(t, n.scrape(t, port), sample)
}

// scrape returns the /metrics text of a port on the node's loopback.
func (n *fullNode) scrape(t *testing.T, port int) string {
	t.Helper()
	resp, err := n.ns.HTTPClient().Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		t.Fatalf("scrape port %d: %v", port, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape port %d: %d %v", port, resp.StatusCode, err)
	}
	return string(b)
}
