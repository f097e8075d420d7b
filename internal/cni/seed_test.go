package cni_test

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSeedConfigs runs ADD and DEL with every network config from the
// documents the project is built from (testdata/seed, copied from
// shared/examples/cni), rewritten only where they point at the outside
// world: etcd, the API server, kubeconfig and certificate files, example
// pool addresses, the node name.
func TestSeedConfigs(t *testing.T) {
	e := newEnv(t, withTLS())
	e.addPool("default-pool", "10.244.0.0/16", 26)
	// The pools 002-ipam-pools-dualstack asks for, moved to private ranges.
	e.addPool("seed-a", "10.200.0.0/24", 28)
	e.addPool("seed-b", "10.201.0.0/16", 26)
	e.addPool("seed-v6", "fd00:db8::/120", 124)

	kube := newFakeAPI(t, "seed-token")
	kube.addNamespace("prod", nil, nil)
	kube.addPod(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "prod", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{ServiceAccountName: "websa"},
	})
	kubeconfig := kube.kubeconfig(t)
	nodenameFile := filepath.Join(t.TempDir(), "nodename")
	if err := os.WriteFile(nodenameFile, []byte(e.node), 0o644); err != nil {
		t.Fatal(err)
	}
	etcdHostPort := strings.TrimPrefix(e.etcd.Endpoints[0], "https://")

	rewrite := strings.NewReplacer(
		// 001-configmap-template.conf placeholders, as install-cni fills them.
		"__ETCD_ENDPOINTS__", e.etcd.Endpoints[0],
		"__ETCD_KEY_FILE__", e.etcd.KeyFile,
		"__ETCD_CERT_FILE__", e.etcd.CertFile,
		"__ETCD_CA_CERT_FILE__", e.etcd.CACertFile,
		"https://__KUBERNETES_SERVICE_HOST__:__KUBERNETES_SERVICE_PORT__", kube.srv.URL,
		"__SERVICEACCOUNT_TOKEN__", "seed-token",
		"__KUBECONFIG_FILEPATH__", kubeconfig,
		// Everything else pointing off this machine.
		"https://10.142.21.21:2379", e.etcd.Endpoints[0],
		"/etc/cni/net.d/calico-tls/etcd-key", e.etcd.KeyFile,
		"/etc/cni/net.d/calico-tls/etcd-cert", e.etcd.CertFile,
		"/etc/cni/net.d/calico-tls/etcd-ca", e.etcd.CACertFile,
		"https://10.233.0.1:443", kube.srv.URL,
		"<service account token>", "seed-token",
		"/etc/kubernetes/kubelet.conf", kubeconfig,
		"/etc/cni/net.d/calico-kubeconfig", kubeconfig,
		"/path/to/kubeconfig", kubeconfig,
		"127.0.0.1:2379", etcdHostPort,
		"<NODENAME>", e.node,
		`"10.0.0.0/24"`, `"10.200.0.0/24"`,
		`"20.0.0.0/16"`, `"10.201.0.0/16"`,
		`"2001:db8::1/120"`, `"fd00:db8::1/120"`,
	)

	files, err := filepath.Glob("testdata/seed/*.conf")
	if err != nil || len(files) == 0 {
		t.Fatalf("no seed configs: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			e := e.in(t)
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var conf map[string]any
			if err := json.Unmarshal([]byte(rewrite.Replace(string(raw))), &conf); err != nil {
				t.Fatal(err)
			}
			// etcd_authority is http by definition: give that seed an http
			// endpoint of its own.
			if _, ok := conf["etcd_authority"]; ok {
				plain := newEnv(t)
				plain.addPool("default-pool", "10.244.0.0/16", 26)
				e = plain
				conf["etcd_authority"] = strings.TrimPrefix(plain.etcd.Endpoints[0], "http://")
			}
			if _, ok := conf["etcd_endpoints"]; !ok && conf["etcd_authority"] == nil {
				// Calico's plugin then reads the etcd settings from its
				// environment (the runtime's).
				t.Setenv("ETCD_ENDPOINTS", e.etcd.Endpoints[0])
				t.Setenv("ETCD_CA_CERT_FILE", e.etcd.CACertFile)
				t.Setenv("ETCD_CERT_FILE", e.etcd.CertFile)
				t.Setenv("ETCD_KEY_FILE", e.etcd.KeyFile)
			}
			// Not the machine's /var/lib/calico/nodename and mtu.
			if _, ok := conf["nodename"]; !ok {
				conf["nodename_file"] = nodenameFile
			}
			if _, ok := conf["mtu"]; !ok {
				conf["mtu"] = 1500
			}
			conf["ipam_lock_file"] = e.lockFile
			_, k8sConfigured := conf["kubernetes"]
			if _, ok := conf["policy"]; ok {
				k8sConfigured = true
			}
			data, _ := json.Marshal(conf)

			var p *pod
			if k8sConfigured {
				p = newPod(t, "prod", "web-0")
			} else {
				p = newPod(t)
			}
			res := e.mustAdd(data, p)
			addrs := podAddrs(t, res)
			if len(addrs) == 0 {
				t.Fatal("ADD assigned no address")
			}
			network := conf["name"].(string)
			eps := e.endpointsOf(p.rt.ContainerID)
			if len(eps) != 1 {
				t.Fatalf("%d endpoints for %s, want 1", len(eps), p.rt.ContainerID)
			}
			ep := eps[0]
			veth := "cali" + p.rt.ContainerID
			if k8sConfigured {
				veth = k8sVethName("prod", "web-0")
				if ep.Name != "node1-k8s-web--0-eth0" || !slices.Equal(ep.Spec.Profiles, []string{"kns.prod", "ksa.prod.websa"}) || ep.Labels["app"] != "web" {
					t.Errorf("endpoint %s profiles %v labels %v: want the pod's", ep.Name, ep.Spec.Profiles, ep.Labels)
				}
			} else if ep.Name != "node1-cni-"+p.rt.ContainerID+"-eth0" || len(ep.Spec.Profiles) != 1 {
				t.Errorf("endpoint %s profiles %v", ep.Name, ep.Spec.Profiles)
			}
			assertPodNetworking(t, p, veth, addrs, 1500)

			if strings.HasPrefix(filepath.Base(f), "002-ipam-pools-dualstack") {
				var v4, v6 bool
				for _, a := range addrs {
					switch {
					case a.Addr().Is4() && (inPrefix(a, "10.200.0.0/24") || inPrefix(a, "10.201.0.0/16")):
						v4 = true
					case inPrefix(a, "fd00:db8::/120"):
						v6 = true
					default:
						t.Errorf("address %s is from none of the configured pools", a)
					}
				}
				if !v4 || !v6 {
					t.Errorf("addresses %v: want one IPv4 and one IPv6 from the configured pools", addrs)
				}
			}

			e.mustDel(data, p)
			e.assertNothingLeft(network, p, veth)
		})
	}
}

func inPrefix(a netip.Prefix, cidr string) bool {
	return netip.MustParsePrefix(cidr).Contains(a.Addr())
}
