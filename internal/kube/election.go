package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// retryJitter is client-go's leader-election JitterFactor: a candidate
// waits between RetryPeriod and 2.2 x RetryPeriod between attempts, so
// that candidates started together do not keep colliding.
const retryJitter = 1.2

// LeaseClient reads and writes one namespace's Leases; the Resource from
// Client.Leases implements it.
type LeaseClient interface {
	Get(ctx context.Context, name string) (*coordinationv1.Lease, error)
	Create(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error)
	Update(ctx context.Context, lease *coordinationv1.Lease) (*coordinationv1.Lease, error)
}

// ElectionConfig configures an Elector. The timings mean what they mean
// for client-go's leaderelection package.
type ElectionConfig struct {
	// Name of the Lease (in the namespace the LeaseClient is bound to).
	Name string
	// Identity is this candidate's holderIdentity.
	Identity string
	// LeaseDuration is how long others wait, after they last saw the
	// Lease change, before taking it over from a holder that stopped
	// renewing.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps retrying a failed
	// renewal before it gives up leading.
	RenewDeadline time.Duration
	// RetryPeriod is the interval between renewals, and (with jitter)
	// between attempts to acquire.
	RetryPeriod time.Duration
	// OnNewLeader is called whenever the observed holder changes, with
	// its identity ("" once a holder released the Lease). It is called
	// from the elector's goroutine and must not block.
	OnNewLeader func(identity string)
	// Logger; nil = discard.
	Logger *slog.Logger
	// Now is the clock; nil = time.Now. Tests inject one.
	Now func() time.Time
}

// Elector takes part in leader election on a coordination.k8s.io/v1
// Lease. See the package documentation for the protocol.
type Elector struct {
	cfg    ElectionConfig
	leases LeaseClient
	log    *slog.Logger
	now    func() time.Time

	// Owned by the goroutine in Lead.
	lease      *coordinationv1.Lease // as last read or written: its resourceVersion
	observed   record                // the Lease's content as last seen
	observedAt time.Time             // our clock when observed last changed
	reported   string                // holder last passed to OnNewLeader
}

// NewElector checks cfg the way client-go's NewLeaderElector does.
func NewElector(cfg ElectionConfig, leases LeaseClient) (*Elector, error) {
	switch {
	case cfg.Name == "":
		return nil, errors.New("leader election: lease name is empty")
	case cfg.Identity == "":
		return nil, errors.New("leader election: identity is empty")
	case cfg.LeaseDuration < time.Second:
		// The Lease stores whole seconds.
		return nil, errors.New("leader election: lease duration must be at least 1s")
	case cfg.LeaseDuration <= cfg.RenewDeadline:
		return nil, errors.New("leader election: lease duration must be greater than the renew deadline")
	case cfg.RetryPeriod <= 0:
		return nil, errors.New("leader election: retry period must be positive")
	case cfg.RenewDeadline <= time.Duration(retryJitter*float64(cfg.RetryPeriod)):
		return nil, fmt.Errorf("leader election: renew deadline must be greater than %v x the retry period", retryJitter)
	}
	e := &Elector{cfg: cfg, leases: leases, log: cfg.Logger, now: cfg.Now}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.now == nil {
		e.now = time.Now
	}
	return e, nil
}

// Lead campaigns until this candidate holds the Lease or ctx ends, then
// runs lead with a context that ends when ctx ends or the Lease is lost,
// renewing the Lease meanwhile. Once lead has returned (after its context
// ended, or on its own) Lead releases the Lease, so that another candidate
// takes over without waiting for it to expire, and returns. It reports
// whether it led. Lead may be called again to stand for the next term; it
// must not be called concurrently.
func (e *Elector) Lead(ctx context.Context, lead func(ctx context.Context)) bool {
	if !e.acquire(ctx) {
		return false
	}
	leadCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		lead(leadCtx)
	}()
	e.renew(leadCtx, done)
	// The Lease is released only once lead has stopped, so two leaders
	// never act at once.
	cancel()
	<-done
	e.release()
	return true
}

// acquire tries until it holds the Lease (true) or ctx ends (false).
func (e *Elector) acquire(ctx context.Context) bool {
	e.log.Debug("attempting to acquire the lease", "lease", e.cfg.Name, "identity", e.cfg.Identity)
	for ctx.Err() == nil {
		ok := e.tryAcquireOrRenew(ctx)
		e.reportHolder()
		if ok {
			e.log.Debug("acquired the lease", "lease", e.cfg.Name)
			return true
		}
		wait := e.cfg.RetryPeriod + time.Duration(rand.Float64()*retryJitter*float64(e.cfg.RetryPeriod))
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	return false
}

// renew renews the Lease every RetryPeriod until ctx ends, lead returns
// (done), or a renewal does not succeed within RenewDeadline.
func (e *Elector) renew(ctx context.Context, done <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case <-time.After(e.cfg.RetryPeriod):
		}
		ok := e.renewWithin(ctx)
		e.reportHolder()
		if !ok {
			if ctx.Err() == nil {
				e.log.Info("failed to renew the lease within the renew deadline; giving up leadership",
					"lease", e.cfg.Name, "deadline", e.cfg.RenewDeadline)
			}
			return
		}
	}
}

// renewWithin retries every RetryPeriod, for at most RenewDeadline.
func (e *Elector) renewWithin(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline)
	defer cancel()
	for {
		if e.tryAcquireOrRenew(ctx) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(e.cfg.RetryPeriod):
		}
	}
}

// isLeader: the Lease, as last seen, names us.
func (e *Elector) isLeader() bool { return e.observed.holder == e.cfg.Identity }

// valid: the Lease as last seen has not expired at now. Expiry is judged
// from when we saw it change, on our own clock, not from its renewTime:
// candidates' clocks may disagree, and a holder's renewal is proof of
// life only when it happens, not when it says it happened.
func (e *Elector) valid(now time.Time) bool {
	return e.observedAt.Add(time.Duration(e.observed.durationSeconds) * time.Second).After(now)
}

// observe records the Lease's content as seen now.
func (e *Elector) observe(r record, now time.Time) {
	if !r.equal(e.observed) || e.observedAt.IsZero() {
		e.observed, e.observedAt = r, now
	}
}

// tryAcquireOrRenew makes one attempt to take or keep the Lease, as
// client-go's elector does: a leader whose view is fresh writes on top of
// the version it wrote last; otherwise the Lease is read, and written
// unless another holder's lease is still valid. Every write is
// conditional on the resourceVersion read, so of two candidates writing
// at once one gets a Conflict and loses.
func (e *Elector) tryAcquireOrRenew(ctx context.Context) bool {
	now := e.now()
	want := record{holder: e.cfg.Identity, durationSeconds: int32(e.cfg.LeaseDuration / time.Second), acquired: now, renewed: now}

	// Fast path: no read.
	if e.isLeader() && e.valid(now) && e.lease != nil {
		want.acquired, want.transitions = e.observed.acquired, e.observed.transitions
		err := e.write(ctx, want)
		if err == nil {
			return true
		}
		e.log.Debug("optimistic lease renewal failed; reading the lease", "lease", e.cfg.Name, "err", err)
	}

	lease, err := e.leases.Get(ctx, e.cfg.Name)
	if apierrors.IsNotFound(err) {
		// The namespace is the one the LeaseClient is bound to; the API
		// server fills it in from the request.
		created, err := e.leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: e.cfg.Name},
			Spec:       want.spec(),
		})
		if err != nil {
			e.logFailure("create lease", err)
			return false
		}
		e.lease = created
		e.observed, e.observedAt = want, e.now()
		return true
	}
	if err != nil {
		e.logFailure("read lease", err)
		return false
	}
	e.lease = lease
	cur := recordOf(&lease.Spec)
	e.observe(cur, now)
	if cur.holder != "" && e.valid(now) && !e.isLeader() {
		return false // held by another, and alive
	}
	if e.isLeader() {
		want.acquired, want.transitions = cur.acquired, cur.transitions
	} else {
		want.transitions = cur.transitions + 1
	}
	if err := e.write(ctx, want); err != nil {
		e.logFailure("update lease", err)
		return false
	}
	return true
}

// release gives the Lease up if it still names us: an empty holder, valid
// for 1s, as client-go writes it, so that any candidate takes it at its
// next attempt. It reads the Lease first, so a holder that took over in
// the meantime is never overwritten.
func (e *Elector) release() {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RenewDeadline)
	defer cancel()
	lease, err := e.leases.Get(ctx, e.cfg.Name)
	if err != nil {
		e.logFailure("read lease to release it", err)
		return
	}
	e.lease = lease
	cur := recordOf(&lease.Spec)
	e.observe(cur, e.now())
	if cur.holder != e.cfg.Identity {
		return
	}
	now := e.now()
	if err := e.write(ctx, record{durationSeconds: 1, acquired: now, renewed: now, transitions: cur.transitions}); err != nil {
		e.logFailure("release lease", err)
		return
	}
	e.log.Debug("released the lease", "lease", e.cfg.Name)
}

// write updates the Lease last read or written to r.
func (e *Elector) write(ctx context.Context, r record) error {
	l := e.lease.DeepCopy()
	l.Spec = r.spec()
	updated, err := e.leases.Update(ctx, l)
	if err != nil {
		return err
	}
	e.lease = updated
	e.observed, e.observedAt = r, e.now()
	return nil
}

// logFailure logs a failed API call. A conflict is the normal outcome of
// losing a race for the Lease, and a cancelled context the normal end of
// a term.
func (e *Elector) logFailure(what string, err error) {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), apierrors.IsConflict(err):
		e.log.Debug(what+" failed", "lease", e.cfg.Name, "err", err)
	default:
		e.log.Error(what+" failed", "lease", e.cfg.Name, "err", err)
	}
}

func (e *Elector) reportHolder() {
	if e.observed.holder == e.reported {
		return
	}
	e.reported = e.observed.holder
	if e.cfg.OnNewLeader != nil {
		e.cfg.OnNewLeader(e.reported)
	}
}

// record is the leader-election content of a Lease spec: the fields
// client-go's LeaderElectionRecord maps onto it.
type record struct {
	holder            string
	durationSeconds   int32
	acquired, renewed time.Time
	transitions       int32
}

func recordOf(s *coordinationv1.LeaseSpec) record {
	var r record
	if s.HolderIdentity != nil {
		r.holder = *s.HolderIdentity
	}
	if s.LeaseDurationSeconds != nil {
		r.durationSeconds = *s.LeaseDurationSeconds
	}
	if s.AcquireTime != nil {
		r.acquired = s.AcquireTime.Time
	}
	if s.RenewTime != nil {
		r.renewed = s.RenewTime.Time
	}
	if s.LeaseTransitions != nil {
		r.transitions = *s.LeaseTransitions
	}
	return r
}

// spec is the Lease spec client-go writes for r: every field set, the
// holder as an empty string (not absent) once released.
func (r record) spec() coordinationv1.LeaseSpec {
	holder, dur, trans := r.holder, r.durationSeconds, r.transitions
	return coordinationv1.LeaseSpec{
		HolderIdentity:       &holder,
		LeaseDurationSeconds: &dur,
		AcquireTime:          &metav1.MicroTime{Time: r.acquired},
		RenewTime:            &metav1.MicroTime{Time: r.renewed},
		LeaseTransitions:     &trans,
	}
}

// equal compares at the Lease's microsecond precision, so our own write
// read back is the same record.
func (r record) equal(o record) bool {
	return r.holder == o.holder && r.durationSeconds == o.durationSeconds && r.transitions == o.transitions &&
		r.acquired.Truncate(time.Microsecond).Equal(o.acquired.Truncate(time.Microsecond)) &&
		r.renewed.Truncate(time.Microsecond).Equal(o.renewed.Truncate(time.Microsecond))
}
