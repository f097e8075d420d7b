package kube

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var leaseResource = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

// fakeLeases is an API server holding at most one Lease, with
// resourceVersion checks on Update as the real one does.
type fakeLeases struct {
	mu      sync.Mutex
	lease   *coordinationv1.Lease
	rv      int
	gets    int
	creates int
	updates int
	// getErr/updateErr fail those calls while set.
	getErr, updateErr error
	// beforeUpdate runs (unlocked) before an Update is applied: another
	// writer racing us.
	beforeUpdate func()
}

func (f *fakeLeases) Get(_ context.Context, name string) (*coordinationv1.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gets++
	if f.getErr != nil {
		return nil, f.getErr
	}
	if f.lease == nil || f.lease.Name != name {
		return nil, apierrors.NewNotFound(leaseResource, name)
	}
	return f.lease.DeepCopy(), nil
}

func (f *fakeLeases) Create(_ context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates++
	if f.lease != nil {
		return nil, apierrors.NewAlreadyExists(leaseResource, l.Name)
	}
	f.store(l)
	return f.lease.DeepCopy(), nil
}

func (f *fakeLeases) Update(_ context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	if f.beforeUpdate != nil {
		f.beforeUpdate()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updates++
	if f.updateErr != nil {
		return nil, f.updateErr
	}
	if f.lease == nil {
		return nil, apierrors.NewNotFound(leaseResource, l.Name)
	}
	if l.ResourceVersion != f.lease.ResourceVersion {
		return nil, apierrors.NewConflict(leaseResource, l.Name, errors.New("the object has been modified"))
	}
	f.store(l)
	return f.lease.DeepCopy(), nil
}

// store keeps l as the next version; times at the API's microsecond
// precision, as a real round trip leaves them.
func (f *fakeLeases) store(l *coordinationv1.Lease) {
	l = l.DeepCopy()
	f.rv++
	l.ResourceVersion = strconv.Itoa(f.rv)
	for _, t := range []*metav1.MicroTime{l.Spec.AcquireTime, l.Spec.RenewTime} {
		if t != nil {
			t.Time = t.Truncate(time.Microsecond)
		}
	}
	f.lease = l
}

// set replaces the Lease as another writer would.
func (f *fakeLeases) set(spec coordinationv1.LeaseSpec) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.store(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "lease"}, Spec: spec})
}

func (f *fakeLeases) current() record {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lease == nil {
		return record{}
	}
	return recordOf(&f.lease.Spec)
}

func (f *fakeLeases) counts() (gets, creates, updates int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets, f.creates, f.updates
}

func (f *fakeLeases) resetCounts() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gets, f.creates, f.updates = 0, 0, 0
}

// t0 is the test clock's "now".
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 123456000, time.UTC)

func held(holder string, durSeconds int32, acquired, renewed time.Time, transitions int32) coordinationv1.LeaseSpec {
	return record{holder: holder, durationSeconds: durSeconds, acquired: acquired, renewed: renewed, transitions: transitions}.spec()
}

func testElector(t *testing.T, leases LeaseClient, now *time.Time) *Elector {
	t.Helper()
	e, err := NewElector(ElectionConfig{
		Name: "lease", Identity: "me",
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		Now: func() time.Time { return *now },
	}, leases)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestTryAcquireOrRenew: one attempt's decision, from the Lease as stored
// and what the elector saw of it before, at t0.
func TestTryAcquireOrRenew(t *testing.T) {
	other := held("other", 15, t0.Add(-time.Hour), t0.Add(-time.Second), 3)
	mine := held("me", 15, t0.Add(-time.Hour), t0.Add(-2*time.Second), 5)
	released := held("", 1, t0.Add(-time.Minute), t0.Add(-time.Minute), 4)
	tests := []struct {
		name string
		// stored is the Lease on the server (nil: none).
		stored *coordinationv1.LeaseSpec
		// seenAgo: the elector made an attempt this long before t0 (0:
		// none). Calls are counted from t0 only.
		seenAgo time.Duration
		// renewed: another writer renewed the Lease after we read it.
		renewedSinceSeen bool
		getErr           error
		// race: another writer updates the Lease between our read and
		// our write.
		race bool

		wantOK                             bool
		wantHolder                         string
		wantTransitions                    int32
		wantAcquired                       time.Time
		wantGets, wantCreates, wantUpdates int
	}{
		{name: "no lease: create it", wantOK: true, wantHolder: "me", wantAcquired: t0,
			wantGets: 1, wantCreates: 1},
		{name: "held by another, first seen now: wait however old its renewTime",
			stored: &other, wantHolder: "other", wantTransitions: 3, wantAcquired: t0.Add(-time.Hour), wantGets: 1},
		{name: "held by another, unchanged for less than its duration",
			stored: &other, seenAgo: 14 * time.Second, wantHolder: "other", wantTransitions: 3, wantAcquired: t0.Add(-time.Hour), wantGets: 1},
		{name: "held by another, unchanged for longer than its duration: take it over",
			stored: &other, seenAgo: 16 * time.Second, wantOK: true, wantHolder: "me", wantTransitions: 4, wantAcquired: t0,
			wantGets: 1, wantUpdates: 1},
		{name: "held by another, renewed since we last saw it",
			stored: &other, seenAgo: time.Minute, renewedSinceSeen: true, wantHolder: "other", wantTransitions: 3, wantAcquired: t0.Add(-time.Hour), wantGets: 1},
		{name: "the holder's lease duration counts, not ours",
			stored: ptr(held("other", 60, t0.Add(-time.Hour), t0.Add(-time.Hour), 3)), seenAgo: 20 * time.Second,
			wantHolder: "other", wantTransitions: 3, wantAcquired: t0.Add(-time.Hour), wantGets: 1},
		{name: "released: take it at once",
			stored: &released, seenAgo: 0, wantOK: true, wantHolder: "me", wantTransitions: 5, wantAcquired: t0,
			wantGets: 1, wantUpdates: 1},
		{name: "held by us (restarted): renew, keep acquireTime and transitions",
			stored: &mine, wantOK: true, wantHolder: "me", wantTransitions: 5, wantAcquired: t0.Add(-time.Hour),
			wantGets: 1, wantUpdates: 1},
		{name: "held by us and seen recently: renew without reading",
			stored: &mine, seenAgo: 2 * time.Second, wantOK: true, wantHolder: "me", wantTransitions: 5, wantAcquired: t0.Add(-time.Hour),
			wantUpdates: 1},
		{name: "held by us, but another wrote since: conflict, then read shows it held",
			stored: &mine, seenAgo: 2 * time.Second, renewedSinceSeen: true,
			wantHolder: "other", wantTransitions: 3, wantAcquired: t0.Add(-time.Hour), wantGets: 1, wantUpdates: 1},
		{name: "read fails: no write", stored: &other, seenAgo: 20 * time.Second, getErr: errors.New("connection refused"),
			wantHolder: "other", wantTransitions: 3, wantAcquired: t0.Add(-time.Hour), wantGets: 1},
		{name: "takeover races another candidate: conflict, we lose",
			stored: &other, seenAgo: 16 * time.Second, race: true,
			wantHolder: "rival", wantTransitions: 4, wantAcquired: t0, wantGets: 1, wantUpdates: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeLeases{}
			now := t0
			e := testElector(t, f, &now)
			if tt.stored != nil {
				f.set(*tt.stored)
				if tt.seenAgo > 0 {
					now = t0.Add(-tt.seenAgo)
					e.tryAcquireOrRenew(context.Background())
				}
				if tt.renewedSinceSeen {
					spec := *tt.stored
					if *spec.HolderIdentity == "me" {
						spec = other
					}
					r := recordOf(&spec)
					r.renewed = t0.Add(-time.Millisecond)
					f.set(r.spec())
				}
			}
			now = t0
			f.resetCounts()
			f.getErr = tt.getErr
			if tt.race {
				f.beforeUpdate = func() {
					f.beforeUpdate = nil
					f.set(held("rival", 15, t0, t0, 4))
				}
			}
			got := e.tryAcquireOrRenew(context.Background())
			if got != tt.wantOK {
				t.Errorf("ok = %v, want %v", got, tt.wantOK)
			}
			rec := f.current()
			if rec.holder != tt.wantHolder || rec.transitions != tt.wantTransitions || !rec.acquired.Equal(tt.wantAcquired.Truncate(time.Microsecond)) {
				t.Errorf("lease = holder %q transitions %d acquired %v; want %q %d %v",
					rec.holder, rec.transitions, rec.acquired, tt.wantHolder, tt.wantTransitions, tt.wantAcquired)
			}
			if got && (!rec.renewed.Equal(t0.Truncate(time.Microsecond)) || rec.durationSeconds != 15) {
				t.Errorf("written lease renewed %v for %ds, want %v for 15s", rec.renewed, rec.durationSeconds, t0)
			}
			gets, creates, updates := f.counts()
			if gets != tt.wantGets || creates != tt.wantCreates || updates != tt.wantUpdates {
				t.Errorf("calls: %d gets, %d creates, %d updates; want %d, %d, %d",
					gets, creates, updates, tt.wantGets, tt.wantCreates, tt.wantUpdates)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestLeaseFields: what the elector writes is what client-go's LeaseLock
// writes, field by field.
func TestLeaseFields(t *testing.T) {
	f := &fakeLeases{}
	now := t0
	e := testElector(t, f, &now)
	if !e.tryAcquireOrRenew(context.Background()) {
		t.Fatal("did not acquire")
	}
	s := f.lease.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity != "me" || s.LeaseDurationSeconds == nil || *s.LeaseDurationSeconds != 15 ||
		s.LeaseTransitions == nil || *s.LeaseTransitions != 0 || s.AcquireTime == nil || !s.AcquireTime.Equal(&metav1.MicroTime{Time: t0}) ||
		s.RenewTime == nil || !s.RenewTime.Equal(&metav1.MicroTime{Time: t0}) || s.Strategy != nil || s.PreferredHolder != nil {
		t.Errorf("created spec = %+v", s)
	}
	now = t0.Add(3 * time.Second)
	e.release()
	s = f.lease.Spec
	if s.HolderIdentity == nil || *s.HolderIdentity != "" || *s.LeaseDurationSeconds != 1 || *s.LeaseTransitions != 0 ||
		!s.AcquireTime.Equal(&metav1.MicroTime{Time: now}) || !s.RenewTime.Equal(&metav1.MicroTime{Time: now}) {
		t.Errorf("released spec = %+v", s)
	}
}

func TestRelease(t *testing.T) {
	tests := []struct {
		name string
		// takenBy: another holder took the Lease after we held it.
		takenBy    string
		getErr     error
		wantHolder string
		wantWrites int
	}{
		{name: "still ours: released", wantHolder: "", wantWrites: 1},
		{name: "taken over meanwhile: left alone", takenBy: "other", wantHolder: "other"},
		{name: "cannot read: left alone", getErr: errors.New("timeout"), wantHolder: "me"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeLeases{}
			now := t0
			e := testElector(t, f, &now)
			if !e.tryAcquireOrRenew(context.Background()) {
				t.Fatal("did not acquire")
			}
			if tt.takenBy != "" {
				f.set(held(tt.takenBy, 15, t0, t0, 1))
			}
			f.getErr = tt.getErr
			f.resetCounts()
			e.release()
			f.getErr = nil
			if got := f.current().holder; got != tt.wantHolder {
				t.Errorf("holder = %q, want %q", got, tt.wantHolder)
			}
			if _, _, updates := f.counts(); updates != tt.wantWrites {
				t.Errorf("%d writes, want %d", updates, tt.wantWrites)
			}
		})
	}
}

func TestNewElectorChecksTimings(t *testing.T) {
	tests := []struct {
		name                string
		lease, renew, retry time.Duration
		wantErr             string
	}{
		{"client-go defaults", 15 * time.Second, 10 * time.Second, 2 * time.Second, ""},
		{"lease not longer than renew deadline", 10 * time.Second, 10 * time.Second, 2 * time.Second, "greater than the renew deadline"},
		{"renew deadline within jittered retry", 15 * time.Second, 2400 * time.Millisecond, 2 * time.Second, "renew deadline"},
		{"sub-second lease", 900 * time.Millisecond, 500 * time.Millisecond, 100 * time.Millisecond, "at least 1s"},
		{"no retry period", 15 * time.Second, 10 * time.Second, 0, "retry period"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewElector(ElectionConfig{Name: "l", Identity: "me", LeaseDuration: tt.lease, RenewDeadline: tt.renew, RetryPeriod: tt.retry}, &fakeLeases{})
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// fastElector has real, short timings for the Lead tests.
func fastElector(t *testing.T, f *fakeLeases, id string, onNewLeader func(string)) *Elector {
	t.Helper()
	e, err := NewElector(ElectionConfig{
		Name: "lease", Identity: id,
		LeaseDuration: time.Second, RenewDeadline: 300 * time.Millisecond, RetryPeriod: 50 * time.Millisecond,
		OnNewLeader: onNewLeader,
	}, f)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestLead: the term's context ends when the Lease is lost, and the Lease
// is released only after lead has returned.
func TestLead(t *testing.T) {
	t.Run("cancelled: lead stops, then the lease is released", func(t *testing.T) {
		f := &fakeLeases{}
		e := fastElector(t, f, "me", nil)
		ctx, cancel := context.WithCancel(context.Background())
		var holderWhenStopped string
		led := e.Lead(ctx, func(ctx context.Context) {
			time.Sleep(200 * time.Millisecond) // a few renewals
			cancel()
			<-ctx.Done()
			time.Sleep(100 * time.Millisecond) // still shutting down
			holderWhenStopped = f.current().holder
		})
		if !led {
			t.Fatal("did not lead")
		}
		if holderWhenStopped != "me" {
			t.Errorf("lease held by %q while lead was stopping, want still ours", holderWhenStopped)
		}
		if r := f.current(); r.holder != "" || r.durationSeconds != 1 {
			t.Errorf("after Lead: holder %q for %ds, want released", r.holder, r.durationSeconds)
		}
		if _, _, updates := f.counts(); updates < 3 {
			t.Errorf("%d updates: lease not renewed while leading", updates)
		}
	})

	t.Run("taken over: lead's context ends, the new holder stays", func(t *testing.T) {
		f := &fakeLeases{}
		var mu sync.Mutex
		var leaders []string
		e := fastElector(t, f, "me", func(id string) {
			mu.Lock()
			defer mu.Unlock()
			leaders = append(leaders, id)
		})
		var lostAfter time.Duration
		led := e.Lead(context.Background(), func(ctx context.Context) {
			time.Sleep(100 * time.Millisecond)
			f.set(held("thief", 30, time.Now(), time.Now(), 9))
			start := time.Now()
			<-ctx.Done()
			lostAfter = time.Since(start)
		})
		if !led {
			t.Fatal("did not lead")
		}
		// The next renewal conflicts and the read shows a live holder;
		// leadership ends when the renew deadline passes.
		if lostAfter > time.Second {
			t.Errorf("lead's context ended %s after the lease was taken, want within the renew deadline", lostAfter)
		}
		if got := f.current().holder; got != "thief" {
			t.Errorf("holder = %q after Lead, want thief (not overwritten by the release)", got)
		}
		mu.Lock()
		defer mu.Unlock()
		if strings.Join(leaders, ",") != "me,thief" {
			t.Errorf("OnNewLeader calls = %v, want me, thief", leaders)
		}
	})

	t.Run("API unreachable: leadership ends after the renew deadline", func(t *testing.T) {
		f := &fakeLeases{}
		e := fastElector(t, f, "me", nil)
		var lostAfter time.Duration
		e.Lead(context.Background(), func(ctx context.Context) {
			time.Sleep(100 * time.Millisecond)
			f.mu.Lock()
			f.getErr, f.updateErr = errors.New("connection refused"), errors.New("connection refused")
			f.mu.Unlock()
			start := time.Now()
			<-ctx.Done()
			lostAfter = time.Since(start)
		})
		// One retry period to the next renewal, then the 300ms deadline.
		if lostAfter < 300*time.Millisecond || lostAfter > 2*time.Second {
			t.Errorf("leadership ended %s after the API went away, want after the 300ms renew deadline", lostAfter)
		}
	})

	t.Run("lead returns on its own: lease released", func(t *testing.T) {
		f := &fakeLeases{}
		e := fastElector(t, f, "me", nil)
		done := make(chan bool)
		go func() { done <- e.Lead(context.Background(), func(context.Context) {}) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Lead did not return after lead did")
		}
		if got := f.current().holder; got != "" {
			t.Errorf("holder = %q, want released", got)
		}
	})

	t.Run("two candidates: one leads, the other takes over on release", func(t *testing.T) {
		f := &fakeLeases{}
		a, b := fastElector(t, f, "a", nil), fastElector(t, f, "b", nil)
		var mu sync.Mutex
		active, maxActive := 0, 0
		lead := func(ctx context.Context) {
			mu.Lock()
			active++
			maxActive = max(maxActive, active)
			mu.Unlock()
			<-ctx.Done()
			mu.Lock()
			active--
			mu.Unlock()
		}
		ctxA, stopA := context.WithCancel(context.Background())
		aDone := make(chan struct{})
		go func() { defer close(aDone); a.Lead(ctxA, lead) }()
		waitHolder(t, f, "a")
		ctxB, stopB := context.WithCancel(context.Background())
		defer stopB()
		bDone := make(chan struct{})
		go func() { defer close(bDone); b.Lead(ctxB, lead) }()
		time.Sleep(300 * time.Millisecond)
		if got := f.current().holder; got != "a" {
			t.Fatalf("holder = %q while a renews, want a", got)
		}
		stopA()
		<-aDone
		start := time.Now()
		waitHolder(t, f, "b")
		// Released: b needs one retry, not a lease duration.
		if d := time.Since(start); d >= time.Second {
			t.Errorf("b took over after %s, want before the 1s lease duration", d)
		}
		if r := f.current(); r.transitions != 1 {
			t.Errorf("leaseTransitions = %d, want 1", r.transitions)
		}
		stopB()
		<-bDone
		mu.Lock()
		defer mu.Unlock()
		if maxActive != 1 {
			t.Errorf("%d candidates led at once", maxActive)
		}
	})
}

func waitHolder(t *testing.T, f *fakeLeases, id string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for f.current().holder != id {
		if time.Now().After(deadline) {
			t.Fatalf("holder = %q, want %q", f.current().holder, id)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
