package startup

import (
	"context"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// TestK8sNodeRef: CALICO_K8S_NODE_REF becomes the Node's only orchRef, as
// Calico writes it; without it orchRefs are left as they are.
func TestK8sNodeRef(t *testing.T) {
	m := newMem()
	cfg := baseConfig(t)
	cfg.K8sNodeRef = "worker-1.example"
	node, err := Run(context.Background(), m, host, cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	want := []api.OrchRef{{NodeName: "worker-1.example", Orchestrator: "k8s"}}
	if len(node.Spec.OrchRefs) != 1 || node.Spec.OrchRefs[0] != want[0] {
		t.Fatalf("orchRefs = %+v, want %+v", node.Spec.OrchRefs, want)
	}

	cfg.K8sNodeRef = ""
	node, err = Run(context.Background(), m, host, cfg, quiet())
	if err != nil {
		t.Fatal(err)
	}
	if len(node.Spec.OrchRefs) != 1 || node.Spec.OrchRefs[0] != want[0] {
		t.Errorf("orchRefs after a restart without the setting = %+v, want kept", node.Spec.OrchRefs)
	}
}
