// Command cnionly is the CNI plugin without the rest of calico-node: the
// same cni package behind a main that links nothing else. BenchmarkCNI
// builds it to show how much of an ADD is the plugin's own work and how
// much is starting (initialising) the full calico-node binary.
package main

import (
	"os"
	"path/filepath"

	"github.com/projectcalico/calico-node/internal/cni"
)

func main() {
	if err := cni.Main(filepath.Base(os.Args[0])); err != nil {
		os.Exit(1)
	}
}
