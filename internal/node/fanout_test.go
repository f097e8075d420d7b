package node

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/pkitest"
	"github.com/projectcalico/calico-node/internal/testkit/proctest"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

// The fan-out's settings are checked before anything starts, on both
// sides, naming the variable at fault.
func TestFanoutConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  bool // `calico-node run`'s flags, else `calico-node fanout`'s
		args []string
		want string // "" parses
	}{
		{"agent: no fan-out", true, nil, ""},
		{"agent: address", true, []string{"--fanout-addr", "calico-fanout.kube-system:5473"}, ""},
		{"agent: TLS", true, []string{"--fanout-addr", "10.96.0.50:5473", "--fanout-ca-file", "ca.pem", "--fanout-cert-file", "c.pem", "--fanout-key-file", "k.pem"}, ""},
		{"agent: no port", true, []string{"--fanout-addr", "calico-fanout"}, "CALICO_FANOUT_ADDR"},
		{"agent: TLS without an address", true, []string{"--fanout-ca-file", "ca.pem"}, "need CALICO_FANOUT_ADDR"},
		{"agent: certificate without key", true, []string{"--fanout-addr", "f:5473", "--fanout-ca-file", "ca.pem", "--fanout-cert-file", "c.pem"}, "go together"},
		{"agent: client certificate without TLS", true, []string{"--fanout-addr", "f:5473", "--fanout-cert-file", "c.pem", "--fanout-key-file", "k.pem"}, "needs CALICO_FANOUT_CA_FILE"},
		{"server: kubernetes", false, []string{"--datastore-type", "kubernetes"}, ""},
		{"server: etcd", false, []string{"--etcd-endpoints", "https://10.0.0.1:2379"}, ""},
		{"server: embedded etcd", false, nil, "set ETCD_ENDPOINTS or DATASTORE_TYPE=kubernetes"},
		{"server: key without certificate", false, []string{"--datastore-type", "kubernetes", "--server-key-file", "k.pem"}, "go together"},
		{"server: client CA without TLS", false, []string{"--datastore-type", "kubernetes", "--client-ca-file", "ca.pem"}, "needs TLS"},
		{"server: tiny queue", false, []string{"--datastore-type", "kubernetes", "--max-queue-bytes", "1000"}, "CALICO_FANOUT_MAX_QUEUE_BYTES"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			app := &cli.App{Name: "calico-node", Writer: io.Discard, ErrWriter: io.Discard}
			if tc.run {
				app.Flags = fanoutClientFlags()
				app.Action = func(c *cli.Context) error { _, err = fanoutClientConfigFrom(c); return nil }
			} else {
				app.Flags = fanoutCommand().Flags
				app.Action = func(c *cli.Context) error {
					_, err = fanoutConfigFrom(c, func(string) string { return "" })
					return nil
				}
			}
			if runErr := app.Run(append([]string{"calico-node"}, tc.args...)); runErr != nil {
				t.Fatal(runErr)
			}
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// startFanout runs `calico-node fanout` on the Kubernetes datastore of c.
func startFanout(t *testing.T, c *kubetest.Cluster, listen, health string, env ...string) *proctest.Proc {
	t.Helper()
	cmd := exec.Command(testbin.Path(t), "fanout", "--listen", listen, "--health-addr", health)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "DATASTORE_TYPE=kubernetes", "KUBECONFIG=" + c.Kubeconfig}, env...)
	p := proctest.Start(t, "calico-node-fanout", cmd)
	p.WaitHTTP(t, 30*time.Second, "http://"+health+"/readiness")
	return p
}

// metric is the value of the sample of name whose labels include match,
// from the Prometheus text at url; -1 when there is none.
func metric(t *testing.T, hc *http.Client, url, name, match string) float64 {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	re := regexp.MustCompile(`(?m)^` + name + `(\{[^}]*\})? (\S+)$`)
	for _, m := range re.FindAllStringSubmatch(string(body), -1) {
		if strings.Contains(m[1], match) {
			v, _ := strconv.ParseFloat(m[2], 64)
			return v
		}
	}
	return -1
}

// TestFanoutKubernetesDatastore: agents with CALICO_FANOUT_ADDR read
// Calico's resources from `calico-node fanout` and hold no watch of their
// own on the API server; they see changes made while the fan-out
// restarts once it is back.
func TestFanoutKubernetesDatastore(t *testing.T) {
	c := startKDD(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	store := storetest.KDD(t, ctx, c)
	createGNP := func(name string) {
		t.Helper()
		g := &api.GlobalNetworkPolicy{TypeMeta: api.TypeMeta{Kind: "GlobalNetworkPolicy", APIVersion: api.GroupVersion}}
		g.Name, g.Spec.Selector = name, "all()"
		if _, err := store.Create(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	createGNP("g1")

	listen := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	fanHealth := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	fan := startFanout(t, c, listen, fanHealth)

	const agents = 2
	var procs []*nodeProc
	for i := range agents {
		name := fmt.Sprintf("fan-node-%d", i)
		if _, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		a := startAgent(t, []string{"--data-dir", t.TempDir(), "--cni-socket", "none"},
			"DATASTORE_TYPE=kubernetes", "KUBECONFIG="+c.Kubeconfig, "NODENAME="+name, "IP=198.51.100.1"+strconv.Itoa(i)+"/24",
			"CALICO_FANOUT_ADDR="+listen)
		procs = append(procs, a)
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	gnps := func(a *nodeProc) float64 {
		return metric(t, hc, "http://"+a.health+"/metrics", "calico_confwatch_resources", `kind="GlobalNetworkPolicy"`)
	}
	for _, a := range procs {
		a.waitReady(t)
		if !strings.Contains(a.logs.String(), "reading Calico's resources from the fan-out") {
			t.Errorf("agent log does not say it reads the fan-out:\n%s", a.logs.Tail(20))
		}
		a.WaitFor(t, 30*time.Second, "the agent's cache holding g1", func() bool { return gnps(a) == 1 })
	}
	if n := metric(t, hc, "http://"+fanHealth+"/metrics", "calico_confwatch_server_clients", ""); n != agents {
		t.Errorf("fan-out serves %v connections, want %d (one per agent)", n, agents)
	}
	// The API server carries the fan-out's watch of the policies, not
	// one per agent.
	admin, err := rest.HTTPClientFor(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	if n := metric(t, admin, c.URL+"/metrics", "apiserver_longrunning_requests", `resource="globalnetworkpolicies"`); n != 1 {
		t.Errorf("API server holds %v watches of globalnetworkpolicies, want 1 (the fan-out's)", n)
	}

	// The fan-out restarts; a policy created meanwhile reaches every agent.
	if err := fan.Stop(15 * time.Second); err != nil {
		t.Errorf("fan-out exit: %v", err)
	}
	createGNP("g2")
	startFanout(t, c, listen, fanHealth)
	for _, a := range procs {
		a.WaitFor(t, 30*time.Second, "the agent's cache holding g1 and g2 after the fan-out restarted", func() bool { return gnps(a) == 2 })
		if err := a.stop(t); err != nil {
			t.Errorf("agent exit: %v", err)
		}
	}
}

// TestFanoutTLS: with a server certificate and a client CA, the fan-out
// serves only agents that verify it and present a certificate of that CA.
func TestFanoutTLS(t *testing.T) {
	c := startKDD(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	file := func(name string) string { return filepath.Join(dir, name) }
	ca, err := pkitest.NewCA("fanout-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Write(file("ca.pem"), file("ca-key.pem")); err != nil {
		t.Fatal(err)
	}
	for _, l := range []struct {
		name  string
		usage x509.ExtKeyUsage
	}{{"server", x509.ExtKeyUsageServerAuth}, {"client", x509.ExtKeyUsageClientAuth}} {
		if err := ca.Issue(pkitest.Leaf{Subject: pkix.Name{CommonName: "calico-" + l.name}, Usage: []x509.ExtKeyUsage{l.usage},
			DNSNames: []string{"calico-fanout"}}, file(l.name+".pem"), file(l.name+"-key.pem")); err != nil {
			t.Fatal(err)
		}
	}
	listen := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	fanHealth := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	startFanout(t, c, listen, fanHealth, "CALICO_FANOUT_SERVER_CERT_FILE="+file("server.pem"),
		"CALICO_FANOUT_SERVER_KEY_FILE="+file("server-key.pem"), "CALICO_FANOUT_CLIENT_CA_FILE="+file("ca.pem"))

	for i, tc := range []struct {
		name string
		env  []string
		ok   bool
	}{
		{"client certificate", []string{"CALICO_FANOUT_CERT_FILE=" + file("client.pem"), "CALICO_FANOUT_KEY_FILE=" + file("client-key.pem")}, true},
		{"no client certificate", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("tls-node-%d", i)
			if _, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			a := startAgent(t, []string{"--data-dir", t.TempDir(), "--cni-socket", "none"}, append([]string{
				"DATASTORE_TYPE=kubernetes", "KUBECONFIG=" + c.Kubeconfig, "NODENAME=" + name, "IP=198.51.100.2" + strconv.Itoa(i) + "/24",
				"CALICO_FANOUT_ADDR=" + listen, "CALICO_FANOUT_CA_FILE=" + file("ca.pem"), "CALICO_FANOUT_SERVER_NAME=calico-fanout",
			}, tc.env...)...)
			if tc.ok {
				a.waitReady(t)
				return
			}
			a.WaitFor(t, 30*time.Second, "the agent reporting the refused connection", func() bool {
				return strings.Contains(a.logs.String(), "tls: certificate required")
			})
			resp, err := http.Get("http://" + a.health + "/readiness")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Error("an agent the fan-out refused reports ready")
			}
		})
	}
}
