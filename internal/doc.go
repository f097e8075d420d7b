// Package internal holds every package of calico-node that the design card
// does not name at the top level, grouped by the part of the system it
// serves:
//
//	node/       the calico-node app: `run`'s actor group, start-up, IP
//	            autodetection, health/metrics server, embedded etcd
//	model/      the data model: api (Calico's v3 kinds, validation, the
//	            parsed IPPool view), selector (Calico's selector language)
//	            and ipamkv (Calico's IPAM keys and values)
//	datastore/  where the model is stored: the Store and KV seam, the etcd
//	            v3 backend (etcd/), the Kubernetes API backend (kdd/, with
//	            crdgen writing deploy/crds.yaml) and connect/, which opens
//	            the one a configuration names
//	ipam/       Calico's block IPAM, one algorithm over either backend
//	policy/     the pure policy compiler, its packet simulator (sim), the
//	            Kubernetes NetworkPolicy translation (k8spolicy) and explain,
//	            which says what Calico does with a packet and why
//	cni/        the calico and calico-ipam plugins, the agent's CNI server,
//	            and cnientry, the plugin's hand-off to the agent
//	ctl/        calicoctl's verbs
//	kube/       the small Kubernetes REST client and Lease elector
//	buildinfo/  the version stamped at build time
//	atomicfile/ files replaced whole (temporary file and rename)
//	ociimage/   the calico-node container image, built without an engine
//	            (mkimage/ is its command)
//	testkit/    test harnesses; no shipped package imports them
//
// The dataplane's kernel parts (iptables, routes, overlays) live beside the
// felix replacement under agent/.
package internal
