package integration

import (
	"os"
	"testing"

	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
)

// nodeNetNSEnv marks the re-executed test process that runs inside the
// private "node" network namespace.
const nodeNetNSEnv = "CALICO_INTEGRATION_NODE_NETNS"

// Without root the tests skip themselves (requireNode).
func TestMain(m *testing.M) {
	netnstest.Main(m, nodeNetNSEnv, func() (func(), error) {
		if err := netnstest.SetupNode(false); err != nil {
			return nil, err
		}
		// This node's agent serves CNI on a socket of its own, and the
		// plugins libcni runs here hand their commands to it; its status
		// socket and endpoint status files are the node's own too.
		return netnstest.PrivateRunDir("calico-integration")
	})
}

func requireNode(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	if os.Getenv(nodeNetNSEnv) == "" {
		t.Skip("needs root: runs in private network namespaces")
	}
}
