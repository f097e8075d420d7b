package node

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestGroupStops: the first actor to return stops the others; one that
// ends on its own with nil is an error (the agent must not exit 0 because
// a part of it stopped), and a signal is a clean stop.
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
			g := newGroup(context.Background(), slog.New(slog.DiscardHandler))
			g.add("bgp", tc.first)
			g.add("confwatch", waitCtx)
			err := g.run()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("run() = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("run() = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
