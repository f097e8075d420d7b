package install

import (
	"testing"

	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
)

// nodeEnv marks the re-executed test process that runs inside the node's
// private network and mount namespaces.
const nodeEnv = "CALICO_INSTALL_TEST_NODE"

// Run as root, the test binary re-executes itself in private network and
// mount namespaces: the node's. Everything the node does to its host
// (interfaces, routes, iptables, the files under its hostPath volumes)
// dies with the test process; the machine's own is never changed. Without
// root the tests fail: they need it.
func TestMain(m *testing.M) {
	netnstest.Main(m, nodeEnv, func() (func(), error) {
		return nil, netnstest.SetupNode(true)
	}, netnstest.PrivateMounts())
}
