package bgp

import (
	"fmt"
	"os"
	"testing"

	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
)

// TestMain gives every agent this package's tests start a private
// /var/run/calico (CNI socket, status socket, endpoint status files):
// tests never write to, or answer for, the machine's.
func TestMain(m *testing.M) {
	undo, err := netnstest.PrivateRunDir("calico-bgp-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, "private run dir:", err)
		os.Exit(1)
	}
	code := m.Run()
	undo()
	os.Exit(code)
}
