package cni_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/ipam"
)

// The stored endpoint and profile of real Calico v3.31's plugin for the same
// pod (shared/reference/calico-3.31-etcd-layout.txt).
const (
	referenceEndpointKey = "/calico/resources/v3/projectcalico.org/workloadendpoints/default/node1-cni-probecontainer000-eth0"
	referenceEndpoint    = `{"kind":"WorkloadEndpoint","apiVersion":"projectcalico.org/v3","metadata":{"name":"node1-cni-probecontainer000-eth0","namespace":"default","uid":"5a0eb6bb-b6a3-4850-8e85-84ac11cba63c","creationTimestamp":"2026-11-21T22:19:32Z","labels":{"projectcalico.org/namespace":"default","projectcalico.org/orchestrator":"cni"}},"spec":{"orchestrator":"cni","node":"node1","containerID":"probecontainer000","endpoint":"eth0","ipNetworks":["10.244.166.128/32"],"profiles":["k8s-pod-network"],"interfaceName":"caliprobecontai","mac":"f6:b0:f3:38:94:1f"}}`
	referenceProfileKey  = "/calico/resources/v3/projectcalico.org/profiles/k8s-pod-network"
	referenceProfile     = `{"kind":"Profile","apiVersion":"projectcalico.org/v3","metadata":{"name":"k8s-pod-network","uid":"c02173b1-38fc-4505-91eb-eee87d14b0cd","creationTimestamp":"2026-11-21T22:19:32Z"},"spec":{"ingress":[{"action":"Allow","source":{"selector":"has(k8s-pod-network)"},"destination":{}}],"egress":[{"action":"Allow","source":{},"destination":{}}],"labelsToApply":{"k8s-pod-network":""}}}`
)

// TestMatchesReference replays the reference capture
// (shared/reference/calico-3.31-cni-netns.txt: etcdv3, MTU 1450, no
// Kubernetes CNI_ARGS) and compares what we build with what real Calico
// built, line by line. The one intended difference: the host route carries
// our route protocol (proto 80), where Calico's has none.
func TestMatchesReference(t *testing.T) {
	e := newEnv(t)
	e.addPool("pool1", "10.244.0.0/16", 26)
	conf := e.conf("1.0.0", map[string]any{"mtu": 1450, "log_level": "info"})
	p := newPod(t)
	p.rt.ContainerID = "probecontainer000"
	res := e.mustAdd(conf, p)
	t.Cleanup(func() { e.del(conf, p) })
	addr := podAddrs(t, res)[0]
	ip := addr.Addr().String()

	t.Run("pod", func(t *testing.T) {
		link := ipOut(t, p, "-d", "link", "show", "eth0")
		for _, want := range []string{"<BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1450 qdisc noqueue state UP", "link-netnsid 0", "veth"} {
			if !strings.Contains(link, want) {
				t.Errorf("pod link lacks %q:\n%s", want, link)
			}
		}
		addrs := ipOut(t, p, "addr", "show", "eth0")
		if !strings.Contains(addrs, "inet "+ip+"/32 scope global eth0") {
			t.Errorf("pod addresses lack %s/32 scope global:\n%s", ip, addrs)
		}
		if !regexp.MustCompile(`inet6 fe80::[0-9a-f:]+/64 scope link`).MatchString(addrs) {
			t.Errorf("pod has no link-local address:\n%s", addrs)
		}
		if got, want := ipOut(t, p, "route", "show"), "default via 169.254.1.1 dev eth0 \n169.254.1.1 dev eth0 scope link \n"; got != want {
			t.Errorf("pod routes:\n%s\nwant:\n%s", got, want)
		}
		if got := ipOut(t, p, "-6", "route", "show"); got != "fe80::/64 dev eth0 proto kernel metric 256 pref medium\n" {
			t.Errorf("pod IPv6 routes:\n%s", got)
		}
		for path, want := range map[string]string{
			"net/ipv4/ip_forward":             "0",
			"net/ipv4/conf/all/forwarding":    "0",
			"net/ipv4/conf/eth0/forwarding":   "0",
			"net/ipv6/conf/eth0/disable_ipv6": "0",
			"net/ipv4/conf/eth0/rp_filter":    "0",
			"net/ipv4/conf/all/rp_filter":     "0",
		} {
			if got := podSysctl(t, p, path); got != want {
				t.Errorf("pod sysctl %s = %s, want %s", path, got, want)
			}
		}
	})

	t.Run("host", func(t *testing.T) {
		link := ipOut(t, nil, "-d", "link", "show", "caliprobecontai")
		for _, want := range []string{"caliprobecontai@if2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1450 qdisc noqueue state UP",
			"link/ether ee:ee:ee:ee:ee:ee brd ff:ff:ff:ff:ff:ff link-netns " + p.name, "addrgenmode eui64"} {
			if !strings.Contains(link, want) {
				t.Errorf("host veth lacks %q:\n%s", want, link)
			}
		}
		// The link-local address appears once the kernel has seen the
		// carrier come up.
		deadline := time.Now().Add(2 * time.Second)
		for {
			addrs := ipOut(t, nil, "addr", "show", "caliprobecontai")
			if strings.Contains(addrs, "inet6 fe80::ecee:eeff:feee:eeee/64 scope link") {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("host veth has no fe80::ecee:eeff:feee:eeee:\n%s", addrs)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if got, want := ipOut(t, nil, "route", "show", "dev", "caliprobecontai"), ip+" proto 80 scope link \n"; got != want {
			t.Errorf("host routes via the veth:\n%q\nwant %q", got, want)
		}
		for path, want := range map[string]string{
			"ipv4/conf/caliprobecontai/proxy_arp":      "1",
			"ipv4/conf/caliprobecontai/forwarding":     "1",
			"ipv4/conf/caliprobecontai/rp_filter":      "0",
			"ipv4/conf/caliprobecontai/route_localnet": "1",
			"ipv4/conf/caliprobecontai/accept_local":   "0",
			"ipv4/neigh/caliprobecontai/proxy_delay":   "0",
			"ipv6/conf/caliprobecontai/disable_ipv6":   "0",
			"ipv6/conf/caliprobecontai/forwarding":     "0",
			"ipv6/conf/caliprobecontai/accept_ra":      "0",
			"ipv6/conf/caliprobecontai/proxy_ndp":      "0",
		} {
			if got := readSysctl(t, "net/"+path); got != want {
				t.Errorf("host sysctl %s = %s, want %s", path, got, want)
			}
		}
	})

	t.Run("etcd", func(t *testing.T) {
		e := e.in(t)
		mac := strings.Fields(strings.SplitAfter(ipOut(t, p, "link", "show", "eth0"), "link/ether ")[1])[0]
		ep := e.raw(referenceEndpointKey)
		var meta struct {
			Metadata struct{ UID, CreationTimestamp string }
		}
		if err := json.Unmarshal([]byte(ep), &meta); err != nil {
			t.Fatal(err)
		}
		got := strings.NewReplacer(
			meta.Metadata.UID, "5a0eb6bb-b6a3-4850-8e85-84ac11cba63c",
			meta.Metadata.CreationTimestamp, "2026-11-21T22:19:32Z",
			`"`+mac+`"`, `"f6:b0:f3:38:94:1f"`,
			`"`+ip+`/32"`, `"10.244.166.128/32"`,
		).Replace(ep)
		if got != referenceEndpoint {
			t.Errorf("stored endpoint (uid, time, MAC and address normalised):\n%s\nwant:\n%s", got, referenceEndpoint)
		}

		prof := e.raw(referenceProfileKey)
		if err := json.Unmarshal([]byte(prof), &meta); err != nil {
			t.Fatal(err)
		}
		got = strings.NewReplacer(
			meta.Metadata.UID, "c02173b1-38fc-4505-91eb-eee87d14b0cd",
			meta.Metadata.CreationTimestamp, "2026-11-21T22:19:32Z",
		).Replace(prof)
		if got != referenceProfile {
			t.Errorf("stored profile:\n%s\nwant:\n%s", got, referenceProfile)
		}

		h := e.raw(ipam.HandleKey("k8s-pod-network.probecontainer000"))
		if !regexp.MustCompile(`^\{"block":\{"10\.244\.\d+\.\d+/26":1\},"deleted":false\}$`).MatchString(h) {
			t.Errorf("IPAM handle %s", h)
		}
	})
}

// raw returns the value stored at key.
func (e *env) raw(key string) string {
	e.t.Helper()
	resp, err := e.kv.Get(e.ctx, key)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		e.t.Fatalf("%s is not stored", key)
	}
	return string(resp.Kvs[0].Value)
}
