package kube

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/projectcalico/calico-node/internal/testkit/kubetest"
	"github.com/projectcalico/calico-node/internal/testkit/polltest"
)

// TestClient exercises every call against a real API server, with the
// default (protobuf) and JSON encodings.
func TestClient(t *testing.T) {
	kc := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	for _, enc := range []struct{ name, contentType string }{
		{"protobuf", ""},
		{"json", "application/json"},
	} {
		t.Run(enc.name, func(t *testing.T) {
			cfg := rest.CopyConfig(kc.Config)
			cfg.ContentType = enc.contentType
			c, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ns := "client-" + enc.name

			// Create and Get; a missing object is a NotFound StatusError.
			if _, err := c.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"team": "a"}}}); err != nil {
				t.Fatal(err)
			}
			got, err := c.Namespaces().Get(ctx, ns)
			if err != nil || got.Labels["team"] != "a" {
				t.Fatalf("get namespace = %v, %v", got, err)
			}
			if _, err := c.Pods(ns).Get(ctx, "nope"); !apierrors.IsNotFound(err) {
				t.Errorf("get missing pod: err = %v, want NotFound", err)
			}

			// An informer on ListWatch: the initial list, then events.
			inf := cache.NewSharedIndexInformer(c.Pods(ns).ListWatch(), &corev1.Pod{}, 0,
				cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			pods := listersv1.NewPodLister(inf.GetIndexer())
			mkPod := func(name, node string) {
				t.Helper()
				_, err := kc.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: name},
					Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
				}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
			}
			mkPod("before", "node-a")
			infCtx, stopInf := context.WithCancel(ctx)
			var wg sync.WaitGroup
			defer func() { stopInf(); wg.Wait() }()
			wg.Go(func() { inf.RunWithContext(infCtx) })
			if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
				t.Fatal("informer did not sync")
			}
			if _, err := pods.Pods(ns).Get("before"); err != nil {
				t.Errorf("informer missed the initial list: %v", err)
			}
			nodeB := "node-b-" + enc.name
			mkPod("after", nodeB)
			waitFor(t, func() error {
				_, err := pods.Pods(ns).Get("after")
				return err
			})
			if err := kc.Client.CoreV1().Pods(ns).Delete(ctx, "before", kubetest.ForceDelete()); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() error {
				if l, _ := pods.List(labels.Everything()); len(l) != 1 {
					return fmt.Errorf("informer has %d pods, want 1", len(l))
				}
				return nil
			})

			// List with a field selector, across namespaces.
			list, err := c.Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", nodeB).String()})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != 1 || list.Items[0].Namespace+"/"+list.Items[0].Name != ns+"/after" {
				var names []string
				for _, p := range list.Items {
					names = append(names, p.Namespace+"/"+p.Name)
				}
				t.Errorf("pods on %s = %v, want %s/after", nodeB, names, ns)
			}

			// Watch from a resource version.
			w, err := c.Namespaces().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + ns, ResourceVersion: got.ResourceVersion})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			got.Labels["team"] = "b"
			updated, err := c.Namespaces().Update(ctx, got)
			if err != nil || updated.Labels["team"] != "b" {
				t.Fatalf("update namespace = %v, %v", updated, err)
			}
			select {
			case ev := <-w.ResultChan():
				if n, ok := ev.Object.(*corev1.Namespace); ev.Type != watch.Modified || !ok || n.Labels["team"] != "b" {
					t.Errorf("watch event = %s %T %v", ev.Type, ev.Object, ev.Object)
				}
			case <-time.After(30 * time.Second):
				t.Error("no watch event")
			}

			// Update is conditional on the resourceVersion.
			if _, err := c.Namespaces().Update(ctx, got); !apierrors.IsConflict(err) {
				t.Errorf("stale update: err = %v, want Conflict", err)
			}

			// Leases round-trip at microsecond precision; NetworkPolicies
			// are reachable in their group.
			now := metav1.NewMicroTime(time.Now())
			holder, secs := "x", int32(15)
			lease, err := c.Leases(ns).Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: "l"},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &now},
			})
			if err != nil {
				t.Fatal(err)
			}
			if lease.Namespace != ns || !lease.Spec.RenewTime.Time.Equal(now.Truncate(time.Microsecond)) {
				t.Errorf("lease = %s/%s renewed %v, want %s/l renewed %v", lease.Namespace, lease.Name, lease.Spec.RenewTime, ns, now)
			}
			if _, err := c.NetworkPolicies(ns).Create(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "np"}}); err != nil {
				t.Fatal(err)
			}
			if nps, err := c.NetworkPolicies("").List(ctx, metav1.ListOptions{}); err != nil || len(nps.Items) == 0 {
				t.Errorf("list network policies = %v, %v", nps, err)
			}
		})
	}
}

func waitFor(t *testing.T, check func() error) {
	t.Helper()
	polltest.Eventually(t, 30*time.Second, "the check to pass", check)
}

// TestElectorInteroperates: this elector and client-go's compete for one
// Lease on a real API server, hand it over to each other at once when
// stopped, and count the transitions alike.
func TestElectorInteroperates(t *testing.T) {
	kc := kubetest.Start(t, kubetest.WithoutControllerManager())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const (
		ns, name      = "default", "interop"
		leaseDuration = 3 * time.Second
		renewDeadline = 2 * time.Second
		retryPeriod   = 200 * time.Millisecond
	)
	c, err := New(kc.Config)
	if err != nil {
		t.Fatal(err)
	}
	ours, err := NewElector(ElectionConfig{Name: name, Identity: "ours",
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}, c.Leases(ns))
	if err != nil {
		t.Fatal(err)
	}
	theirs := func(ctx context.Context, leading chan<- struct{}) {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: &resourcelock.LeaseLock{
				LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: name},
				Client:     kc.Client.CoordinationV1(),
				LockConfig: resourcelock.ResourceLockConfig{Identity: "client-go"},
			},
			LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
			ReleaseOnCancel: true,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) { close(leading) },
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			t.Error(err)
			return
		}
		le.Run(ctx)
	}
	lease := func() *coordinationv1.Lease {
		t.Helper()
		l, err := kc.Client.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	holderIs := func(id string) func() error {
		return func() error {
			if h := lease().Spec.HolderIdentity; h == nil || *h != id {
				return fmt.Errorf("holder = %v, want %s", h, id)
			}
			return nil
		}
	}

	// Ours leads; client-go's waits.
	oursCtx, stopOurs := context.WithCancel(ctx)
	oursLeading, oursDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(oursDone)
		ours.Lead(oursCtx, func(ctx context.Context) { close(oursLeading); <-ctx.Done() })
	}()
	<-oursLeading
	theirCtx, stopTheirs := context.WithCancel(ctx)
	theirLeading, theirDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(theirDone); theirs(theirCtx, theirLeading) }()
	select {
	case <-theirLeading:
		t.Fatal("client-go's elector leads while ours holds the lease")
	case <-time.After(2 * leaseDuration):
	}
	l := lease()
	if *l.Spec.LeaseDurationSeconds != 3 || l.Spec.AcquireTime == nil || l.Spec.RenewTime == nil || time.Since(l.Spec.RenewTime.Time) > time.Second {
		t.Errorf("lease while ours renews = %+v", l.Spec)
	}
	transitions := *l.Spec.LeaseTransitions
	// handedOver: the elector that was waiting (leading, named holder)
	// takes the lease at once when the other releases it, without waiting
	// for the lease to expire, and the lease counts one more transition.
	handedOver := func(leading <-chan struct{}, holder string, wantTransitions int32) {
		t.Helper()
		stopped := time.Now()
		select {
		case <-leading:
		case <-time.After(leaseDuration):
			t.Fatalf("%s did not take the released lease within %s", holder, leaseDuration)
		}
		t.Logf("%s took over %s after the other elector stopped", holder, time.Since(stopped).Round(time.Millisecond))
		waitFor(t, holderIs(holder))
		if got := *lease().Spec.LeaseTransitions; got != wantTransitions {
			t.Errorf("leaseTransitions = %d after the handover to %s, want %d", got, holder, wantTransitions)
		}
	}

	// Ours stops and releases: client-go's takes over without waiting for
	// the lease to expire.
	stopOurs()
	<-oursDone
	handedOver(theirLeading, "client-go", transitions+1)

	// And back: ours waits while client-go's renews, then takes over at
	// once when it releases.
	oursCtx, stopOurs = context.WithCancel(ctx)
	defer stopOurs()
	oursLeading, oursDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(oursDone)
		ours.Lead(oursCtx, func(ctx context.Context) { close(oursLeading); <-ctx.Done() })
	}()
	select {
	case <-oursLeading:
		t.Fatal("ours leads while client-go's holds the lease")
	case <-time.After(2 * leaseDuration):
	}
	stopTheirs()
	<-theirDone
	handedOver(oursLeading, "ours", transitions+2)
	stopOurs()
	<-oursDone
	if h := lease().Spec.HolderIdentity; h == nil || *h != "" {
		t.Errorf("holder after ours stopped = %v, want released", h)
	}
}
