package integration

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/policy/k8spolicy"
	"github.com/projectcalico/calico-node/internal/testkit/storetest"
)

// The pods: web in "prod" serves; client in "prod" and builder in "dev"
// connect to it. Every pod listens on TCP and UDP 8080 and 9050.
var namespaceProfiles = storetest.NamespaceProfile("prod", map[string]string{"env": "prod"}) +
	storetest.NamespaceProfile("dev", map[string]string{"env": "dev"}) +
	storetest.ServiceAccountProfile("prod", "web") +
	storetest.ServiceAccountProfile("prod", "client") +
	storetest.ServiceAccountProfile("dev", "builder")

const policyPool = `
apiVersion: projectcalico.org/v3
kind: IPPool
metadata: {name: pool}
spec: {cidr: 10.65.0.0/16, blockSize: 26}
`

// verdicts of the matrix, in matrix order (see matrix).
type verdicts map[string]bool

// flow is one probe: from a namespace to an address.
type flow struct {
	name  string
	src   ns.NetNS
	proto string
	dst   string
	port  int
}

type cluster struct {
	n                    *node
	web, client, builder *pod
}

// matrix is every pod-to-web probe, plus pod-to-node and outside-to-node.
func (c *cluster) matrix() []flow {
	var fs []flow
	for _, src := range []*pod{c.client, c.builder} {
		for _, pp := range []struct {
			proto string
			port  int
		}{{"tcp", 8080}, {"udp", 8080}, {"tcp", 9050}, {"icmp", 0}} {
			fs = append(fs, flow{fmt.Sprintf("%s->web %s/%d", src.name, pp.proto, pp.port), src.ns, pp.proto, c.web.ip, pp.port})
		}
	}
	fs = append(fs,
		flow{"web->client tcp/8080", c.web.ns, "tcp", c.client.ip, 8080},
		flow{"client->node tcp/8080", c.client.ns, "tcp", nodeIP, 8080},
		flow{"outside->node tcp/8080", c.n.ext, "tcp", nodeIP, 8080},
		flow{"outside->node tcp/22", c.n.ext, "tcp", nodeIP, 22},
	)
	return fs
}

// expect builds the verdicts: everything allowed except the named flows
// (prefix match on the flow name), or, with allowOnly, only those.
func (c *cluster) expect(allowOnly bool, names ...string) verdicts {
	v := verdicts{}
	for _, f := range c.matrix() {
		hit := false
		for _, n := range names {
			if strings.HasPrefix(f.name, n) {
				hit = true
			}
		}
		v[f.name] = hit == allowOnly
	}
	return v
}

// waitMatrix polls the probe matrix until it equals want or the deadline.
func (c *cluster) waitMatrix(t *testing.T, want verdicts) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var got verdicts
	for {
		got = c.probeAll()
		var diff []string
		for name, w := range want {
			if got[name] != w {
				diff = append(diff, fmt.Sprintf("%s: got allowed=%v, want %v", name, got[name], w))
			}
		}
		if len(diff) == 0 {
			return
		}
		if time.Now().After(deadline) {
			sort.Strings(diff)
			t.Fatalf("probe matrix wrong after 20s:\n  %s", strings.Join(diff, "\n  "))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *cluster) probeAll() verdicts {
	fs := c.matrix()
	got := make([]bool, len(fs))
	var wg sync.WaitGroup
	for i, f := range fs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = probe(f.src, f.proto, f.dst, f.port)
		}()
	}
	wg.Wait()
	v := verdicts{}
	for i, f := range fs {
		v[f.name] = got[i]
	}
	return v
}

func TestPolicyOnRealPackets(t *testing.T) { testPolicyOnRealPackets(t, newNode(t)) }

// testPolicyOnRealPackets runs the policy cases on either datastore. On
// etcd the namespaces' and service accounts' profiles are written as
// Calico resources (what the profile controllers write); on the Kubernetes
// datastore Calico computes them from the Namespaces and ServiceAccounts.
func testPolicyOnRealPackets(t *testing.T, n *node) {
	n.apply(t, policyPool)
	if n.kc == nil {
		n.apply(t, namespaceProfiles)
	}
	n.addNamespace(t, "prod", map[string]string{"env": "prod"})
	n.addNamespace(t, "dev", map[string]string{"env": "dev"})
	// Another program's rules, there before the agent: they must survive.
	run(t, "iptables", "-N", "OTHER-PROG")
	run(t, "iptables", "-A", "OTHER-PROG", "-s", "203.0.113.7", "-j", "DROP")
	run(t, "iptables", "-A", "FORWARD", "-s", "203.0.113.8", "-j", "ACCEPT")
	t.Cleanup(func() {
		// The package's tests share the node namespace: the next case
		// (the other datastore's) adds them again.
		exec.Command("iptables", "-D", "FORWARD", "-s", "203.0.113.8", "-j", "ACCEPT").Run()
		exec.Command("iptables", "-F", "OTHER-PROG").Run()
		exec.Command("iptables", "-X", "OTHER-PROG").Run()
	})
	other := func() string {
		var fwd []string
		for _, l := range strings.Split(run(t, "iptables", "-S", "FORWARD"), "\n") {
			if strings.Contains(l, "203.0.113.8") {
				fwd = append(fwd, l)
			}
		}
		return run(t, "iptables", "-S", "OTHER-PROG") + strings.Join(fwd, "\n")
	}
	otherBefore := other()
	// The node listens too: 8080 (pods and outside), 22 (failsafe).
	if err := listenEcho(t, 8080, 22); err != nil {
		t.Fatal(err)
	}
	n.startAgent(t)

	c := &cluster{n: n}
	c.web = n.addPod(t, "prod", "web", "web", map[string]string{"app": "web"},
		corev1.ContainerPort{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP})
	c.client = n.addPod(t, "prod", "client", "client", map[string]string{"app": "client"})
	c.builder = n.addPod(t, "dev", "builder", "builder", map[string]string{"app": "client"})
	// The plugin handed those ADDs to the node's agent (package cnientry).
	if served := n.metric(t, `calico_cni_server_requests_total{reason="",result="served"}`); served < 3 {
		t.Errorf("the agent served %v CNI commands, want the 3 ADDs", served)
	}
	// Pods may reach the node unless a case says otherwise (felix's
	// default is Drop; calico-node manifests set Accept).
	n.apply(t, `
apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec: {defaultEndpointToHostAction: Accept}
`)

	cases := []struct {
		name      string
		yaml      string
		k8s       *networkingv1.NetworkPolicy
		allowOnly bool     // want lists the only allowed flows
		want      []string // flows (name prefixes) denied, or allowed with allowOnly
	}{
		{name: "no policy: profiles allow"},
		{name: "deny by default once selected", allowOnly: true,
			want: []string{"client->web tcp/8080", "web->client", "client->node", "outside->node"},
			yaml: webPolicy("app == 'client'")},
		{name: "order and Pass across tiers", allowOnly: true,
			want: []string{"builder->web tcp/8080", "web->client", "client->node", "outside->node"},
			yaml: `
apiVersion: projectcalico.org/v3
kind: Tier
metadata: {name: security}
spec: {order: 100}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: security.gate}
spec:
  tier: security
  order: 1
  selector: app == 'web'
  ingress:
  - action: Pass
    source: {namespaceSelector: env == 'dev'}
  - action: Deny
---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: no-9050, namespace: prod}
spec:
  order: 10
  selector: app == 'web'
  ingress:
  - action: Deny
    protocol: TCP
    destination: {ports: [9050]}
---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: tcp, namespace: prod}
spec:
  order: 20
  selector: app == 'web'
  ingress:
  - action: Allow
    protocol: TCP
`},
		{name: "named port", allowOnly: true,
			want: []string{"client->web tcp/8080", "builder->web tcp/8080", "web->client", "client->node", "outside->node"},
			yaml: `
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: http}
spec:
  selector: app == 'web'
  ingress:
  - action: Allow
    protocol: TCP
    destination: {ports: [http]}
`},
		{name: "port range", allowOnly: true,
			want: []string{"client->web tcp/9050", "builder->web tcp/9050", "web->client", "client->node", "outside->node"},
			yaml: `
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: range}
spec:
  selector: app == 'web'
  ingress:
  - action: Allow
    protocol: TCP
    destination: {ports: ["9000:9100"]}
`},
		{name: "nets except notNets", allowOnly: true,
			want: []string{"client->web", "web->client", "client->node", "outside->node"},
			yaml: `
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: nets}
spec:
  selector: app == 'web'
  ingress:
  - action: Allow
    source: {nets: [10.65.0.0/16], notNets: [BUILDER/32]}
`},
		{name: "namespaceSelector", allowOnly: true,
			want: []string{"builder->web", "web->client", "client->node", "outside->node"},
			yaml: `
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: from-dev}
spec:
  selector: app == 'web'
  ingress:
  - action: Allow
    source: {namespaceSelector: env == 'dev'}
`},
		{name: "serviceAccountSelector", allowOnly: true,
			want: []string{"client->web", "web->client", "client->node", "outside->node"},
			yaml: `
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: sa}
spec:
  selector: all()
  serviceAccountSelector: projectcalico.org/name == 'web'
  types: [Ingress]
  ingress:
  - action: Allow
    source: {serviceAccounts: {names: [client]}}
`},
		{name: "NetworkSet", allowOnly: true,
			want: []string{"builder->web", "web->client", "client->node", "outside->node"},
			yaml: `
apiVersion: projectcalico.org/v3
kind: NetworkSet
metadata: {name: trusted, namespace: prod, labels: {role: trusted}}
spec: {nets: [BUILDER/32]}
---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: trusted, namespace: prod}
spec:
  selector: app == 'web'
  ingress:
  - action: Allow
    source: {selector: role == 'trusted'}
`},
		{name: "Log then Allow TCP", allowOnly: true,
			want: []string{"client->web tcp", "builder->web tcp", "web->client", "client->node", "outside->node"},
			yaml: `
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: log}
spec:
  selector: app == 'web'
  ingress:
  - action: Log
  - action: Allow
    protocol: TCP
`},
		{name: "egress to the host: Drop",
			want: []string{"client->node"},
			yaml: `
apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: node.node1}
spec: {defaultEndpointToHostAction: Drop}
`},
		{name: "Kubernetes NetworkPolicy", allowOnly: true,
			want: []string{"client->web tcp/8080", "web->client", "client->node", "outside->node"},
			k8s: &networkingv1.NetworkPolicy{
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod"},
				Spec: networkingv1.NetworkPolicySpec{
					PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
					Ingress: []networkingv1.NetworkPolicyIngressRule{{
						From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}},
						Ports: []networkingv1.NetworkPolicyPort{{Port: ptr(intstr.FromInt32(8080))}},
					}},
					PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				},
			}},
		{name: "HostEndpoint deny-all keeps the failsafe port",
			want: []string{"outside->node tcp/8080"},
			yaml: `
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node1-uplink0, labels: {host: node1}}
spec: {node: node1, interfaceName: uplink0, expectedIPs: [192.0.2.1]}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: host-deny-all}
spec:
  selector: has(host)
  types: [Ingress, Egress]
`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.yaml != "" {
				undo := n.apply(t, strings.ReplaceAll(tc.yaml, "BUILDER", c.builder.ip))
				defer undo()
			}
			switch {
			case tc.k8s != nil && n.kc != nil:
				// Calico reads Kubernetes' own object.
				knp := n.kc.Client.NetworkingV1().NetworkPolicies(tc.k8s.Namespace)
				if _, err := knp.Create(n.ctx, tc.k8s, metav1.CreateOptions{}); err != nil {
					t.Fatalf("create %s: %v", tc.k8s.Name, err)
				}
				defer func() {
					if err := knp.Delete(n.ctx, tc.k8s.Name, metav1.DeleteOptions{}); err != nil {
						t.Errorf("delete %s: %v", tc.k8s.Name, err)
					}
				}()
			case tc.k8s != nil:
				// What the policy controller writes.
				np, err := k8spolicy.Convert(tc.k8s)
				if err != nil {
					t.Fatalf("convert: %v", err)
				}
				n.applyObject(t, np)
				defer n.deleteObject(t, np)
			}
			c.waitMatrix(t, c.expect(tc.allowOnly, tc.want...))
			if strings.HasPrefix(tc.name, "Log") && !strings.Contains(run(t, "iptables-save", "-t", "filter"), "-j LOG") {
				t.Error("no LOG rule programmed")
			}
		})
		// The case undid itself: back to all allowed before the next one,
		// so that no case can pass on its predecessor's rules.
		c.waitMatrix(t, c.expect(false))
	}

	t.Run("spoofed source address", func(t *testing.T) {
		// A datagram from client with builder's address must not reach
		// web (raw PREROUTING's reverse-path check), until the operator
		// allows spoofing and client's endpoint lists builder's address.
		const port = 9200
		var l net.PacketConn
		if err := c.web.ns.Do(func(ns.NetNS) error {
			var err error
			l, err = net.ListenPacket("udp4", fmt.Sprintf(":%d", port))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		seen := make(chan string, 64)
		go func() {
			buf := make([]byte, 64)
			for {
				_, addr, err := l.ReadFrom(buf)
				if err != nil {
					return
				}
				select {
				case seen <- addr.(*net.UDPAddr).IP.String():
				default:
				}
			}
		}()
		// arrives sends from client with source address from, every
		// 100ms, until web receives one or wait is over.
		arrives := func(from string, wait time.Duration) bool {
			t.Helper()
			for deadline := time.Now().Add(wait); time.Now().Before(deadline); {
				if err := sendUDPFrom(c.client.ns, from, c.web.ip, port); err != nil {
					t.Fatalf("send from %s: %v", from, err)
				}
				tick := time.After(100 * time.Millisecond)
			drain:
				for {
					select {
					case src := <-seen:
						if src == from {
							return true
						}
					case <-tick:
						break drain
					}
				}
			}
			return false
		}
		if !arrives(c.client.ip, 5*time.Second) {
			t.Fatal("client's datagrams with its own address do not reach web")
		}
		if arrives(c.builder.ip, 2*time.Second) {
			t.Fatal("a datagram from client with builder's address reached web")
		}
		undo := n.apply(t, `
apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: node.node1}
spec: {workloadSourceSpoofing: Any}
`)
		defer undo()
		setPrefixes := func(prefixes ...string) {
			t.Helper()
			if n.kc != nil {
				// On KDD the endpoint is the Pod's: its annotation.
				n.annotatePod(t, "prod", "client", "cni.projectcalico.org/allowedSourcePrefixes", prefixes)
				return
			}
			objs, _, err := n.store.List(n.ctx, "WorkloadEndpoint", "prod")
			if err != nil {
				t.Fatalf("list endpoints: %v", err)
			}
			for _, o := range objs {
				if w := o.(*api.WorkloadEndpoint); w.Spec.Pod == "client" {
					w.Spec.AllowSpoofedSourcePrefixes = prefixes
					n.applyObject(t, w)
					return
				}
			}
			t.Fatal("no WorkloadEndpoint for pod prod/client")
		}
		setPrefixes(c.builder.ip + "/32")
		defer setPrefixes()
		if !arrives(c.builder.ip, 20*time.Second) {
			t.Fatal("with allowSpoofedSourcePrefixes, client's datagrams with builder's address still do not reach web")
		}
	})
	c.waitMatrix(t, c.expect(false))

	t.Run("restart keeps connections and rules", func(t *testing.T) {
		undo := n.apply(t, strings.ReplaceAll(cases[1].yaml, "BUILDER", c.builder.ip))
		defer undo()
		c.waitMatrix(t, c.expect(true, cases[1].want...))
		time.Sleep(resync + time.Second) // a resync passed: the state is settled
		before := caliRules(t)
		var conn net.Conn
		c.client.ns.Do(func(ns.NetNS) error {
			var err error
			conn, err = net.DialTimeout("tcp4", net.JoinHostPort(c.web.ip, "8080"), time.Second)
			return err
		})
		if conn == nil {
			t.Fatal("no connection client->web")
		}
		defer conn.Close()
		echo := func(msg string) {
			t.Helper()
			conn.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := conn.Write([]byte(msg)); err != nil {
				t.Fatalf("write %q: %v", msg, err)
			}
			buf := make([]byte, len(msg))
			if _, err := conn.Read(buf); err != nil || string(buf) != msg {
				t.Fatalf("echo %q: got %q, %v", msg, buf, err)
			}
		}
		echo("before")
		n.agent.stop(t)
		echo("while stopped")
		if got := caliRules(t); got != before {
			t.Errorf("stopping the agent changed the rules:\n%s", lineDiff(before, got))
		}
		n.startAgent(t)
		echo("after restart")
		if got := caliRules(t); got != before {
			t.Errorf("restart changed the rules:\n%s", lineDiff(before, got))
		}
		c.waitMatrix(t, c.expect(true, cases[1].want...))

		t.Run("a rule deleted by hand is restored by the resync", func(t *testing.T) {
			chain := ""
			for _, l := range strings.Split(run(t, "iptables-save", "-t", "filter"), "\n") {
				if strings.HasPrefix(l, "-A cali-pi-") {
					chain = strings.Fields(l)[1]
					break
				}
			}
			if chain == "" {
				t.Fatal("no cali-pi-* policy chain programmed")
			}
			run(t, "iptables", "-D", chain, "1")
			if caliRules(t) == before {
				t.Fatal("deleting a rule changed nothing")
			}
			deadline := time.Now().Add(resync + 10*time.Second)
			for caliRules(t) != before {
				if time.Now().After(deadline) {
					t.Fatalf("rule not restored within %s:\n%s", resync+10*time.Second, lineDiff(before, caliRules(t)))
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	})

	if got := other(); got != otherBefore {
		t.Errorf("another program's rules changed:\nbefore:\n%s\nafter:\n%s", otherBefore, got)
	}
}

// sendUDPFrom sends one datagram from the namespace src to dst:port with
// source address from, which src need not have: IP_TRANSPARENT lets the
// socket bind and send from any address, as a pod with NET_ADMIN could.
func sendUDPFrom(src ns.NetNS, from, dst string, port int) error {
	return src.Do(func(ns.NetNS) error {
		lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_IP, syscall.IP_TRANSPARENT, 1)
			}); err != nil {
				return err
			}
			return serr
		}}
		c, err := lc.ListenPacket(context.Background(), "udp4", net.JoinHostPort(from, "0"))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.WriteTo([]byte("spoof"), &net.UDPAddr{IP: net.ParseIP(dst), Port: port})
		return err
	})
}

func ptr[T any](v T) *T { return &v }

// lineDiff lists the lines only in a (-) or only in b (+).
func lineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	var out []string
	for l := range ma {
		if !mb[l] {
			out = append(out, "- "+l)
		}
	}
	for l := range mb {
		if !ma[l] {
			out = append(out, "+ "+l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}
