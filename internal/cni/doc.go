// Package cni is the CNI plugin side of the binary: `calico` (the network
// plugin) and `calico-ipam` (the IPAM plugin) are the same executable, chosen
// by argv[0].
//
// # Model
//
// A container runtime executes the plugin with CNI_* environment variables
// and the network config on stdin; the plugin answers with a result (in the
// cniVersion the config asks for, 0.1.0 to 1.1.0) or a CNI error JSON on
// stdout, and logs to stderr only. Error codes: 1 incompatible version, 3
// the pod's netns (or Kubernetes pod) is gone, 4 bad CNI_* variables, 6
// undecodable config, 7 invalid config (the message names the field), 8
// CNI_NETNS is no namespace, 11 try again later (etcd or the API server
// unreachable, pool exhausted, lost a race), 50 plugin not available
// (STATUS), 999 anything else.
//
// What ADD builds is Calico's (shared/reference/calico-3.31-cni-netns.txt):
//
//   - host veth "cali" + 11 characters: for a Kubernetes pod the first 11
//     hex digits of sha1("<namespace>.<pod>") (FELIX_INTERFACEPREFIX's
//     first entry replaces "cali"), for plain CNI the first 11 characters of
//     the container ID; MAC ee:ee:ee:ee:ee:ee; proxy_arp, forwarding,
//     route_localnet on, proxy_delay 0, accept_ra 0 (IPv6: forwarding,
//     proxy_ndp, no DAD, EUI-64 link-local);
//   - a /32 (/128) host route to each pod address via the veth, with the
//     project's route protocol (routeproto.Calico, 80), where Calico's has
//     none: so that the agent's route reconciler owns it;
//   - inside the pod CNI_IFNAME with the address(es) as /32 and /128,
//     "169.254.1.1 dev eth0 scope link" and "default via 169.254.1.1",
//     for IPv6 "default via fe80::ecee:eeff:feee:eeee" (the host veth's
//     link-local address, fixed because its MAC and address generation
//     mode are: computed, never waited for), ip_forward off;
//   - the WorkloadEndpoint exactly as Calico writes it (name
//     "<node>-k8s-<pod>-<iface>" or "<node>-cni-<containerID>-<iface>",
//     dashes doubled; namespace the pod's, "default" for plain CNI); for a
//     Kubernetes pod read from the API server (kubeconfig, or the policy
//     section's k8s_api_root and k8s_auth_token) its labels plus
//     projectcalico.org/namespace, /orchestrator, /serviceaccount, its
//     named and host ports, and the profiles kns.<ns> and ksa.<ns>.<sa>;
//     otherwise the profile named after the network, which is created
//     (ingress from the network's members, egress open) when the config has
//     no policy section, as Calico does.
//
// Addresses come from Calico IPAM, in-process when "ipam" is calico-ipam
// (the same code the calico-ipam plugin runs, under the handle
// "<network>.<containerID>", honouring ipv4_pools, ipv6_pools, assign_ipv4,
// assign_ipv6 and the cni.projectcalico.org/ipv4pools, ipv6pools,
// ipFamilies (pod or namespace) and ipAddrs (pod) annotations), or from any
// other IPAM plugin, executed as runtimes do (found in CNI_PATH, same
// config, CNI_ARGS with IgnoreUnknown=1; host-local's "usePodCidr" is
// replaced by the node's pod CIDR). The calico-ipam plugin reports each
// address with its block's prefix length, as Calico's does.
//
// Decisions where Calico leaves room:
//
//   - A second ADD for a plain-CNI container that already has an endpoint
//     (another network or interface name) builds nothing: it adds this
//     network's profile to the endpoint and reports the endpoint's
//     addresses, as Calico does. A Kubernetes pod's new sandbox (new
//     container ID) gets new addresses and a new veth under the pod's
//     endpoint, which is updated to the new container; DEL of the old
//     sandbox then frees only the old addresses (Calico's behaviour too).
//   - A network name that is not a valid resource name ("any_name") gets
//     the profile "any-name": Calico would write an endpoint its own
//     validation rejects.
//   - The node name is the nodename option, else the nodename_file
//     (default /var/lib/calico/nodename, written by calico-node; a
//     configured file must exist), else the deprecated hostname option,
//     else the host name. Calico insists on the file unless
//     nodename_file_optional; we fall back, so a node without calico-node
//     still works.
//   - A netns deleted while ADD runs (we hold it open, so the veth would
//     die with it) fails the ADD with code 3 after undoing everything.
//   - ADD returns only once this node's agent has programmed the
//     endpoint's policy and routes (programmed.go): on by default, with
//     policy_setup_timeout_seconds (default the agent's
//     --policy-setup-timeout, 5 s; 0: no wait) bounding the wait, after
//     which ADD fails with code 11 and is undone (Calico: off by default,
//     and a timeout only warns). The agent-served ADD waits on the
//     agent's own record (Dataplane); a plugin process polls the agent's
//     status file in endpoint_status_dir, and only where an agent has
//     marked that directory for this node or the field is set.
//   - While the datastore is locked (ClusterInformation datastoreReady
//     false: `calicoctl datastore migrate lock`), ADD and DEL fail with
//     Calico's "Calico is currently not ready to process requests" (code
//     11) before allocating or releasing anything; DEL may already have
//     removed the pod's interface, which a retry finds gone. A datastore
//     with no ClusterInformation is not locked (Calico's plugin fails
//     there instead).
//
// # Design
//
// The containernetworking skel package owns the protocol (environment,
// version negotiation, error encoding); this package supplies the
// commands. ADD is latency-critical (kubelet waits for it): it connects to
// etcd once, makes one ranged read for an existing endpoint, one IPAM
// operation, and writes the endpoint and the profile at the same time, then
// waits for the agent's dataplane (which the endpoint's write triggered); the
// Kubernetes pod is read while etcd is being connected to; the veth is
// created from the host with its peer placed straight into the pod's
// namespace and configured while the addresses are being allocated, with a
// single namespace switch (for the pod's sysctls; it also opens a netlink
// socket inside the pod used for the rest). Every step of ADD registers its
// undo, run in reverse when a later step fails: a failed ADD leaves no
// address, veth or endpoint, except what etcd accepted before it went away
// (the undo cannot reach it either); the runtime's DEL releases that, and
// so does a retried ADD of the same container, whose allocation replaces
// whatever its handle still holds. DEL deletes the endpoint (a Kubernetes one only
// if it still names this container), the pod's interface and the addresses
// concurrently, and treats anything already gone as done. When the pod's
// namespace is gone (or not given) it removes the host veth by name
// instead of waiting for the kernel to destroy the namespace (a
// Kubernetes pod's veth only if no newer sandbox owns the endpoint). CHECK compares
// the pod interface, addresses, routes, host veth and routes, and the
// endpoint with prevResult. STATUS is ready when the datastore answers a
// read (etcd, or the Kubernetes API server). GC removes
// this node's endpoints and IPAM handles of containers not in
// cni.dev/valid-attachments. Phases are logged at debug level with their
// durations. Served by the agent on its own Kubernetes datastore, an ADD
// reads the pod, its namespace, ClusterInformation, pools, reservations
// and the Node from the agent's watches (view.go), and checks after its
// write that the pod's IPAM annotations did not change under it.
//
// # Thread safety
//
// One invocation per process. Background goroutines of one command share
// the datastore client, which is safe for concurrent use, and otherwise own
// what they build until the command collects it.
package cni
