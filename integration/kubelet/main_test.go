package kubelet

import (
	"testing"

	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
)

// nodeNetNSEnv marks the re-executed test process that runs inside the
// node's private network namespace.
const nodeNetNSEnv = "CALICO_KUBELET_TEST_NODE_NETNS"

// Run as root, the test binary re-executes itself in a private network
// namespace: the node's. kube-apiserver, kubelet, containerd, the agent
// and the pods' host ends all live there, and it dies with the test
// process; the machine's own namespace is never programmed. Without root
// TestKubeletNode fails: it needs root.
func TestMain(m *testing.M) {
	netnstest.Main(m, nodeNetNSEnv, func() (func(), error) {
		if err := netnstest.SetupNode(true); err != nil {
			return nil, err
		}
		// The agent serves CNI on a socket of its own (containerd passes
		// the variable on to the plugins it runs), its status socket and
		// endpoint status files in the same private directory.
		return netnstest.PrivateRunDir("calico-kubelet")
	})
}
