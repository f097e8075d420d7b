package texttest

import (
	"fmt"
	"slices"
	"testing"
)

// recorder keeps what Contains reports instead of failing the test.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestContains(t *testing.T) {
	r := &recorder{TB: t}
	got := "IP Pool 10.0.0.0/24\nBlock 10.0.0.0/26\n"
	Contains(r, "ipam show", got, "IP Pool 10.0.0.0/24", "Block 10.0.0.64/26", "Borrowed")
	want := []string{
		"ipam show lacks \"Block 10.0.0.64/26\":\n" + got,
		"ipam show lacks \"Borrowed\":\n" + got,
	}
	if !slices.Equal(r.errs, want) {
		t.Errorf("reported %q, want %q", r.errs, want)
	}
}
