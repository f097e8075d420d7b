package errtest

import (
	"errors"
	"testing"
)

// recorder is a testing.TB that records a Fatalf instead of stopping.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Fatalf(string, ...any) { r.failed = true }

func TestWant(t *testing.T) {
	boom := errors.New("parse x: bad value")
	for _, tc := range []struct {
		name       string
		err        error
		want       string
		fails, ret bool
	}{
		{"no error wanted, none", nil, "", false, true},
		{"no error wanted, one", boom, "", true, true},
		{"error wanted, it came", boom, "bad value", false, false},
		{"error wanted, another came", boom, "missing", true, false},
		{"error wanted, none came", nil, "bad value", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{TB: t}
			if got := Want(r, tc.err, tc.want); got != tc.ret || r.failed != tc.fails {
				t.Errorf("Want = %v, failed %v; want %v, failed %v", got, r.failed, tc.ret, tc.fails)
			}
		})
	}
}
