package xtables

import (
	"context"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/policy"
)

// TestPlanWritesNothing: Plan says what Apply would write, and writing it
// is Apply's job alone. Against an empty kernel it plans every chain and
// set; once applied, nothing; after a change to the policy, exactly the
// changed chains and sets; and the kernel is the same before and after
// each Plan.
func TestPlanWritesNothing(t *testing.T) {
	r := newNS(t)
	ctx := context.Background()
	b, err := Detect(ctx, r, 4)
	if err != nil {
		t.Skip(err)
	}
	p := New(b, r, nil, quiet())
	// Without iptables-save's "# Generated ... on <time>" lines: two
	// saves a second apart differ there.
	kernel := func() string { return normalSave(r.sh(t, b.Save)) + r.sh(t, "ipset", "save") }
	one, two := policy.Compile(snapshot(false)).V4, policy.Compile(snapshot(true)).V4

	before := kernel()
	plan, err := p.Plan(ctx, one)
	if err != nil {
		t.Fatal(err)
	}
	if kernel() != before {
		t.Fatal("Plan changed the kernel")
	}
	if !strings.Contains(plan.Restore, ":cali-FORWARD - [0:0]") || !strings.Contains(plan.Restore, "-I FORWARD 1 ") ||
		!strings.Contains(plan.IPSets, "create cali40") || plan.Stats.ChainsWritten == 0 {
		t.Errorf("plan against an empty kernel: %+v", plan)
	}
	st, err := p.Apply(ctx, one)
	if err != nil {
		t.Fatal(err)
	}
	if st.ChainsWritten != plan.Stats.ChainsWritten || st.SetsWritten != plan.Stats.SetsWritten || st.HooksFixed != plan.Stats.HooksFixed {
		t.Errorf("Apply wrote %+v, Plan said %+v", st, plan.Stats)
	}
	if plan, err = p.Plan(ctx, one); err != nil || !plan.Empty() {
		t.Errorf("plan once applied: %+v, %v", plan, err)
	}

	before = kernel()
	plan, err = p.Plan(ctx, two)
	if err != nil {
		t.Fatal(err)
	}
	if kernel() != before {
		t.Fatal("Plan changed the kernel")
	}
	if plan.Empty() || !strings.Contains(plan.Restore, "Policy default/db ingress") {
		t.Errorf("plan of the added policy lacks its chain:\n%s", plan.Restore)
	}
	if strings.Contains(plan.Restore, ":cali-INPUT ") {
		t.Errorf("plan rewrites an unchanged chain:\n%s", plan.Restore)
	}
	st, err = p.Apply(ctx, two)
	if err != nil {
		t.Fatal(err)
	}
	if st.ChainsWritten != plan.Stats.ChainsWritten || st.SetsWritten != plan.Stats.SetsWritten {
		t.Errorf("Apply wrote %+v, Plan said %+v", st, plan.Stats)
	}
	// Back to one policy: the other's chain and set are stale.
	plan, err = p.Plan(ctx, one)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan.Restore, "-X ") || plan.Stats.ChainsDeleted == 0 || !strings.Contains(plan.DestroySets, "destroy cali40") {
		t.Errorf("plan back to one policy deletes nothing: %+v", plan)
	}
}
