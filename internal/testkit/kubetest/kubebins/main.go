// Command kubebins fills the kubetest binary cache (kube-apiserver,
// kube-controller-manager, kubectl, kubelet, kube-scheduler) before the test packages run, so that
// `make test` builds them once instead of racing test binaries for the lock.
// It prints the cache directory.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kubebins:", err)
		os.Exit(1)
	}
}

func run() error {
	if os.Getenv("CALICO_KUBE_TESTS") == "skip" {
		fmt.Fprintln(os.Stderr, "kubebins: CALICO_KUBE_TESTS=skip, not building")
		return nil
	}
	bins, err := kubetest.EnsureBinaries(context.Background(), os.Stderr)
	if err != nil {
		return err
	}
	fmt.Println(bins.APIServer)
	fmt.Println(bins.ControllerManager)
	fmt.Println(bins.Kubectl)
	fmt.Println(bins.Kubelet)
	fmt.Println(bins.Scheduler)
	return nil
}
