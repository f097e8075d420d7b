package node

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

// TestGroupStops: the first actor to return stops the others; one that
// ends on its own with nil is an error (the agent must not exit 0 because
// a part of it stopped), and a signal is a clean stop. Each actor's stop
// is logged as Prometheus's main.go logs it: "stopping X" when the group
// asks it to stop, "X stopped" (with its error, if any) when it returned.
func TestGroupStops(t *testing.T) {
	waitCtx := func(ctx context.Context) error { <-ctx.Done(); return nil }
	for _, tc := range []struct {
		name    string
		first   func(ctx context.Context) error
		wantErr string // "" = nil
	}{
		{"actor ends with nil on its own", func(context.Context) error { return nil }, "bgp stopped unexpectedly"},
		{"actor fails", func(context.Context) error { return errors.New("boom") }, "boom"},
		{"signal", func(context.Context) error { return errSignalled }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs strings.Builder
			g := newGroup(context.Background(), slog.New(slog.NewTextHandler(&logs, nil)))
			g.add("bgp", tc.first)
			g.add("confwatch", waitCtx)
			err := g.run()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("run() = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("run() = %v, want an error containing %q", err, tc.wantErr)
			}
			var msgs []string
			for line := range strings.Lines(logs.String()) {
				_, rest, _ := strings.Cut(line, `msg="`)
				msg, _, _ := strings.Cut(rest, `"`)
				msgs = append(msgs, msg)
			}
			// bgp returned first; the group then stops both, and
			// confwatch returns only once asked to.
			at := func(msg string) int {
				i := slices.Index(msgs, msg)
				if i < 0 {
					t.Errorf("no %q logged; logs:\n%s", msg, logs.String())
				}
				return i
			}
			if at("bgp stopped") > at("stopping confwatch") || at("stopping confwatch") > at("confwatch stopped") {
				t.Errorf("logged out of order, want bgp stopped, stopping confwatch, confwatch stopped:\n%s", logs.String())
			}
			at("stopping bgp")
			if len(msgs) != 4 {
				t.Errorf("%d lines logged, want 4:\n%s", len(msgs), logs.String())
			}
			if tc.wantErr != "" && !strings.Contains(logs.String(), `msg="bgp stopped" err=`) {
				t.Errorf("bgp's stop is logged without its error:\n%s", logs.String())
			}
		})
	}
}
