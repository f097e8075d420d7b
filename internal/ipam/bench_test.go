package ipam_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/ipam"
)

// BenchmarkAutoAssign measures what a CNI ADD and DEL cost in IPAM on a
// real etcd and a real kube-apiserver: one AutoAssign from the node's existing block and one
// ReleaseByHandle, each through a fresh Client as a plugin process would.
// The "assign-ms" metric is the AutoAssign half alone.
func BenchmarkAutoAssign(b *testing.B) {
	for _, be := range []backend{etcdBinary, kubeAPI} {
		b.Run(be.name, func(b *testing.B) { benchmarkAutoAssign(b, be.open(b)) })
	}
}

func benchmarkAutoAssign(b *testing.B, f *fixture) {
	f.create(b, ippool("pool1", "10.50.0.0/16", 26), node("node1", nil))
	f.assign4(b, "node1", "warm-up") // the node's block exists, as on a running node
	var assign time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		c := ipam.New(f.kv, f.store, nil)
		handle := fmt.Sprintf("k8s-pod-network.bench%d", i)
		t0 := time.Now()
		if _, _, err := c.AutoAssign(f.ctx, ipam.AutoAssignArgs{Num4: 1, HandleID: handle, Node: "node1"}); err != nil {
			b.Fatal(err)
		}
		assign += time.Since(t0)
		if err := c.ReleaseByHandle(f.ctx, handle); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(assign.Microseconds())/1000/float64(b.N), "assign-ms")
}
