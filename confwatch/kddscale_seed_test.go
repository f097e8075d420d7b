package confwatch

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/kdd"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/scaletest"
	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

// The cluster the scale harness seeds: what a Calico KDD cluster of
// `nodes` nodes holds in the Kubernetes API, with objects shaped as kubelet,
// the CNI plugin and the usual controllers leave them (node status with
// images, pods with probes, status and Calico's CNI annotations), because
// the size of every listed and watched object is what the API server
// serialises and every agent decodes.
type clusterShape struct {
	nodes       int // Kubernetes Nodes with Calico's annotations
	podsPerNode int
	namespaces  int // each with 2 ServiceAccounts, 5 Kubernetes NetworkPolicies and 1 Calico NetworkPolicy
	gnps        int // GlobalNetworkPolicies
	netsets     int // GlobalNetworkSets of 20 networks
}

func (s clusterShape) pods() int { return s.nodes * s.podsPerNode }

// probe objects: the harness changes them and times their arrival.
const (
	probeGNP       = "bench-probe"
	probeNamespace = "ns-00"
	probePod       = "probe"
	seedWorkers    = 16
)

func nodeName(i int) string { return fmt.Sprintf("node-%04d", i) }

// kddCluster is a kube-apiserver with Calico's CRDs and RBAC installed and
// the cluster seeded.
type kddCluster struct {
	kc    *kubetest.Cluster
	store *kdd.Store // the harness's own writer, like calicoctl
	shape clusterShape

	metrics *http.Client // admin client for /metrics
	gen     int          // last probe generation written
}

func startKDDCluster(tb testing.TB, shape clusterShape) *kddCluster {
	tb.Helper()
	// No controller manager: the harness creates the ServiceAccounts
	// itself and nothing else of it is needed; its watches and CPU would
	// only blur the API server's figures.
	kc := kubetest.Start(tb, kubetest.WithoutControllerManager())
	for _, f := range []string{"crds.yaml", "rbac-kdd.yaml"} {
		if out, err := kc.RunKubectl(nil, "apply", "--server-side", "-f", filepath.Join(testbin.RepoRoot(), "deploy", f)); err != nil {
			tb.Fatalf("apply %s: %v\n%s", f, err, out)
		}
	}
	if out, err := kc.RunKubectl(nil, "wait", "--for=condition=Established", "--timeout=120s", "crd", "--all"); err != nil {
		tb.Fatalf("wait for CRDs: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := kdd.New(ctx, datastore.Config{Type: datastore.TypeKubernetes, Kube: datastore.KubeConfig{Kubeconfig: kc.Kubeconfig}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { store.Close() })
	c := &kddCluster{kc: kc, store: store, shape: shape}
	c.seed(tb)
	c.warmUp(tb)
	return c
}

// warmUp lists every kind until the API server answers them all: a custom
// resource's watch cache starts on its first request and answers 429
// ("storage is (re)initializing") until it has, which agents started
// right after the CRDs would report as retried lists.
func (c *kddCluster) warmUp(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for _, info := range api.Kinds() {
		for {
			_, _, err := c.store.List(context.Background(), info.Kind, "")
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("list %s: %v", info.Kind, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// parallel runs fn(0..n-1) on seedWorkers goroutines and fails tb with the
// first error.
func parallel(tb testing.TB, n int, fn func(i int) error) {
	tb.Helper()
	if err := scaletest.Parallel(seedWorkers, n, fn); err != nil {
		tb.Fatal(err)
	}
}

func (c *kddCluster) seed(tb testing.TB) {
	tb.Helper()
	ctx := context.Background()
	s := c.shape
	cs := c.kc.Client
	t0 := time.Now()

	// Cluster-wide Calico configuration, as calico-node's start-up and an
	// operator's manifests leave it.
	c.createCalico(tb,
		`{"apiVersion":"projectcalico.org/v3","kind":"IPPool","metadata":{"name":"default-ipv4-ippool"},
		  "spec":{"cidr":"10.240.0.0/12","blockSize":26,"ipipMode":"Always","natOutgoing":true,"nodeSelector":"all()"}}`,
		`{"apiVersion":"projectcalico.org/v3","kind":"FelixConfiguration","metadata":{"name":"default"},
		  "spec":{"bpfLogLevel":"","floatingIPs":"Disabled","logSeverityScreen":"Info","reportingInterval":"0s"}}`,
		`{"apiVersion":"projectcalico.org/v3","kind":"BGPConfiguration","metadata":{"name":"default"},
		  "spec":{"logSeverityScreen":"Info","nodeToNodeMeshEnabled":true,"asNumber":64512}}`,
		`{"apiVersion":"projectcalico.org/v3","kind":"ClusterInformation","metadata":{"name":"default"},
		  "spec":{"calicoVersion":"v3.31.0","clusterType":"k8s,bgp,kdd","datastoreReady":true}}`,
	)
	var calico []string
	for i := range s.gnps {
		calico = append(calico, fmt.Sprintf(`{"apiVersion":"projectcalico.org/v3","kind":"GlobalNetworkPolicy","metadata":{"name":"gnp-%03d"},
		  "spec":{"order":%d,"selector":"app == 'app%d'","types":["Ingress","Egress"],
		    "ingress":[{"action":"Allow","protocol":"TCP","source":{"selector":"app == 'app%d'"},"destination":{"ports":[8080,"9000:9100"]}},
		               {"action":"Allow","protocol":"TCP","source":{"namespaceSelector":"team == 'team%d'"},"destination":{"ports":[443]}}],
		    "egress":[{"action":"Allow","protocol":"UDP","destination":{"selector":"k8s-app == 'kube-dns'","ports":[53]}},
		              {"action":"Allow","destination":{"nets":["10.%d.0.0/16"]}}]}}`,
			i, 100+i, i%20, (i+1)%20, i%5, i%200))
	}
	for i := range s.netsets {
		nets := ""
		for j := range 20 {
			if j > 0 {
				nets += ","
			}
			nets += fmt.Sprintf(`"198.%d.%d.0/24"`, 18+i%2, j+20*(i/2)%236)
		}
		calico = append(calico, fmt.Sprintf(`{"apiVersion":"projectcalico.org/v3","kind":"GlobalNetworkSet","metadata":{"name":"netset-%02d","labels":{"feed":"feed%d"}},"spec":{"nets":[%s]}}`, i, i%3, nets))
	}
	for n := range s.namespaces {
		calico = append(calico, fmt.Sprintf(`{"apiVersion":"projectcalico.org/v3","kind":"NetworkPolicy","metadata":{"name":"allow-monitoring","namespace":"ns-%02d"},
		  "spec":{"order":500,"selector":"all()","ingress":[{"action":"Allow","protocol":"TCP","source":{"namespaceSelector":"kubernetes.io/metadata.name == 'monitoring'"},"destination":{"ports":["metrics"]}}]}}`, n))
	}
	// The probe policy the latency measurement changes.
	calico = append(calico, fmt.Sprintf(`{"apiVersion":"projectcalico.org/v3","kind":"GlobalNetworkPolicy","metadata":{"name":%q,"labels":{%q:"0"}},
	  "spec":{"order":50,"selector":"app == 'probe'","ingress":[{"action":"Allow","protocol":"TCP","destination":{"ports":[8080]}}]}}`, probeGNP, probeLabel))

	// Namespaces with their ServiceAccounts (Calico profiles) and policies.
	parallel(tb, s.namespaces, func(n int) error {
		name := fmt.Sprintf("ns-%02d", n)
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: name, Labels: map[string]string{"team": fmt.Sprintf("team%d", n%5), "env": []string{"prod", "staging"}[n%2]},
		}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create namespace %s: %w", name, err)
		}
		for _, sa := range []string{"default", "app"} {
			if _, err := cs.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{
				Name: sa, Labels: map[string]string{"team": fmt.Sprintf("team%d", n%5)},
			}}, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create service account %s/%s: %w", name, sa, err)
			}
		}
		for _, np := range k8sPolicies(name, n) {
			if _, err := cs.NetworkingV1().NetworkPolicies(name).Create(ctx, np, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create network policy %s/%s: %w", name, np.Name, err)
			}
		}
		return nil
	})
	c.createCalico(tb, calico...)

	// Nodes: created, then their status written as kubelet does.
	parallel(tb, s.nodes, func(i int) error {
		n := k8sNode(i)
		status := n.Status
		created, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create node %s: %w", n.Name, err)
		}
		created.Status = status
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("node %s status: %w", n.Name, err)
		}
		return nil
	})

	// Pods, spread over the namespaces, each bound to its node with an
	// address from Calico IPAM (a /26 block affine to each node, a handle
	// per pod, as the CNI plugin leaves them) in Calico's annotations and
	// in its status. One worker per node: a node's pods share its block.
	ipc := c.ipam()
	total := s.pods()
	parallel(tb, s.nodes, func(node int) error {
		for j := range s.podsPerNode {
			k := node*s.podsPerNode + j
			ns, name := c.podName(k)
			if err := c.createPod(ctx, ipc, ns, name, fmt.Sprintf("app%d", k%20), node, fmt.Sprintf("%064x", k+1), nil); err != nil {
				return err
			}
		}
		if node == 0 {
			return c.createPod(ctx, ipc, probeNamespace, probePod, "probe", 0, fmt.Sprintf("%064x", total+1), map[string]string{probeLabel: "0"})
		}
		return nil
	})
	fmt.Printf("seeded %d nodes, %d pods, %d namespaces, %d GlobalNetworkPolicies, %d Kubernetes NetworkPolicies in %s\n",
		s.nodes, total+1, s.namespaces, s.gnps+1, 5*s.namespaces, time.Since(t0).Round(time.Millisecond))
}

// ipam is a Calico IPAM client on the harness's store, as the CNI plugin
// has.
func (c *kddCluster) ipam() *ipam.Client { return ipam.New(c.store.IPAM(), c.store, nil) }

// createPod allocates the pod's address, then creates the pod with it and
// writes its status, as the CNI plugin and kubelet do. labels are added to
// the usual ones.
func (c *kddCluster) createPod(ctx context.Context, ipc *ipam.Client, ns, name, app string, node int, containerID string, labels map[string]string) error {
	v4, _, err := ipc.AutoAssign(ctx, ipam.AutoAssignArgs{
		Num4: 1, HandleID: "k8s-pod-network." + containerID, Node: nodeName(node),
		Attrs: map[string]string{"namespace": ns, "pod": name},
	})
	if err != nil || len(v4) != 1 {
		return fmt.Errorf("assign an address to pod %s/%s: %v (%v)", ns, name, err, v4)
	}
	p := k8sPod(ns, name, app, node, containerID, v4[0].Addr().String())
	maps.Copy(p.Labels, labels)
	cs := c.kc.Client
	status := p.Status
	created, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create pod %s/%s: %w", ns, name, err)
	}
	created.Status = status
	if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("pod %s/%s status: %w", ns, name, err)
	}
	return nil
}

// createCalico creates Calico resources given as projectcalico.org/v3 JSON
// through the store, as calicoctl would.
func (c *kddCluster) createCalico(tb testing.TB, docs ...string) {
	tb.Helper()
	parallel(tb, len(docs), func(i int) error {
		ds, err := api.DecodeAndValidate([]byte(docs[i]))
		if err != nil {
			return err
		}
		for _, d := range ds {
			if d.Err != nil {
				return fmt.Errorf("%s: %w", docs[i], d.Err)
			}
			if _, err := c.store.Create(context.Background(), d.Object); err != nil {
				return fmt.Errorf("create %s %s: %w", d.Kind, d.Name, err)
			}
		}
		return nil
	})
}

func k8sPolicies(ns string, n int) []*networkingv1.NetworkPolicy {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	port := func(p int) *intstr.IntOrString { v := intstr.FromInt32(int32(p)); return &v }
	named := func(p string) *intstr.IntOrString { v := intstr.FromString(p); return &v }
	app := func(i int) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app%d", i)}}
	}
	return []*networkingv1.NetworkPolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: "default-deny-ingress", Namespace: ns},
			Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "allow-same-app", Namespace: ns},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: *app(n % 20), Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: app(n % 20)}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: port(8080)}, {Protocol: &tcp, Port: named("http")}},
			}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "allow-from-team", Namespace: ns},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: *app((n + 1) % 20), Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("team%d", n%5)}}}},
			}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "allow-dns-egress", Namespace: ns},
			Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}, Egress: []networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}}, PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: port(53)}, {Protocol: &tcp, Port: port(53)}},
			}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "allow-egress-cidr", Namespace: ns},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: *app((n + 2) % 20), PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}, Egress: []networkingv1.NetworkPolicyEgressRule{{
				To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "172.16.0.0/12", Except: []string{"172.16.1.0/24"}}}},
			}}}},
	}
}

// k8sNode is a Node as kubelet and calico-node's start-up leave it.
func k8sNode(i int) *corev1.Node {
	name := nodeName(i)
	addr := fmt.Sprintf("10.0.%d.%d", i>>8, i&255+1)
	images := make([]corev1.ContainerImage, 0, 16)
	for j := range 16 {
		images = append(images, corev1.ContainerImage{
			Names:     []string{fmt.Sprintf("registry.example/team/image-%02d@sha256:%064x", j, j*7919+i), fmt.Sprintf("registry.example/team/image-%02d:v1.%d.0", j, j)},
			SizeBytes: int64(20_000_000 + j*3_000_000),
		})
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	cond := func(t corev1.NodeConditionType, status corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: status, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	qty := resource.MustParse
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
				"node.kubernetes.io/instance-type": "m5.xlarge", "topology.kubernetes.io/zone": fmt.Sprintf("zone-%c", 'a'+i%3),
				"topology.kubernetes.io/region": "region-1",
			},
			Annotations: map[string]string{
				"projectcalico.org/IPv4Address":                          addr + "/16",
				"projectcalico.org/IPv4IPIPTunnelAddr":                   fmt.Sprintf("10.%d.%d.1", 240+i>>8, i&255),
				"node.alpha.kubernetes.io/ttl":                           "0",
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
				"kubeadm.alpha.kubernetes.io/cri-socket":                 "unix:///run/containerd/containerd.sock",
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.%d.%d.0/24", 240+i>>8, i&255)},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{"cpu": qty("4"), "memory": qty("16Gi"), "pods": qty("110"), "ephemeral-storage": qty("100Gi")},
			Allocatable: corev1.ResourceList{"cpu": qty("3800m"), "memory": qty("15Gi"), "pods": qty("110"), "ephemeral-storage": qty("90Gi")},
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
				cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
				cond(corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "CalicoIsUp", "Calico is running on this node"),
			},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: addr}, {Type: corev1.NodeHostName, Address: name}},
			NodeInfo: corev1.NodeSystemInfo{
				MachineID: fmt.Sprintf("%032x", i), SystemUUID: fmt.Sprintf("ec2%029x", i), BootID: fmt.Sprintf("%032x", i*31),
				KernelVersion: "6.1.0-18-cloud-amd64", OSImage: "Debian GNU/Linux 12 (bookworm)", ContainerRuntimeVersion: "containerd://1.7.24",
				KubeletVersion: "v1.36.3", OperatingSystem: "linux", Architecture: "amd64",
			},
			Images:          images,
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
		},
	}
}

// k8sPod is a running pod of a Deployment as kubelet and Calico's CNI
// plugin leave it.
func k8sPod(ns, name, app string, node int, containerID, ip string) *corev1.Pod {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	cond := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now}
	}
	ctr := func(cname, image string, port int32, portName string) corev1.Container {
		return corev1.Container{
			Name: cname, Image: image,
			Ports: []corev1.ContainerPort{{Name: portName, ContainerPort: port, Protocol: corev1.ProtocolTCP}, {Name: portName + "-metrics", ContainerPort: port + 1000, Protocol: corev1.ProtocolTCP}},
			Env: []corev1.EnvVar{
				{Name: "LOG_LEVEL", Value: "info"}, {Name: "APP_NAME", Value: app},
				{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
			},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{"cpu": resource.MustParse("100m"), "memory": resource.MustParse("128Mi")},
				Limits:   corev1.ResourceList{"memory": resource.MustParse("256Mi")},
			},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString(portName)}}, PeriodSeconds: 10},
		}
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels: map[string]string{"app": app, "pod-template-hash": "7d9f8b6c5", "tier": []string{"web", "api", "db"}[len(name)%3], "version": "v1"},
			Annotations: map[string]string{
				"cni.projectcalico.org/containerID": containerID,
				"cni.projectcalico.org/podIP":       ip + "/32",
				"cni.projectcalico.org/podIPs":      ip + "/32",
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app + "-7d9f8b6c5",
				UID: types.UID(fmt.Sprintf("6f1c2b3a-0000-4000-8000-%012d", len(app))), Controller: new(true), BlockOwnerDeletion: new(true),
			}},
		},
		Spec: corev1.PodSpec{
			NodeName: nodeName(node), ServiceAccountName: "app",
			Containers:    []corev1.Container{ctr("app", "registry.example/team/"+app+":v1.2.3", 8080, "http"), ctr("sidecar", "registry.example/proxy:v2.0.1", 15000, "proxy")},
			Tolerations:   []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: new(int64(300))}},
			DNSPolicy:     corev1.DNSClusterFirst,
			RestartPolicy: corev1.RestartPolicyAlways,
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{cond("PodReadyToStartContainers"), cond(corev1.PodInitialized), cond(corev1.PodReady), cond(corev1.ContainersReady), cond(corev1.PodScheduled)},
			HostIP:     fmt.Sprintf("10.0.%d.%d", node>>8, node&255+1),
			PodIP:      ip, PodIPs: []corev1.PodIP{{IP: ip}},
			StartTime: &now, QOSClass: corev1.PodQOSBurstable,
		},
	}
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Ready: true, Started: new(true), Image: c.Image,
			ImageID:     "registry.example/team/" + c.Name + "@sha256:" + containerID,
			ContainerID: "containerd://" + containerID,
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	return p
}
