package refresh

import (
	"testing"
	"time"
)

func TestTicker(t *testing.T) {
	tests := []struct {
		name     string
		initial  time.Duration
		set      []time.Duration // applied in order before the last Start
		wantTick bool
		period   time.Duration
	}{
		{name: "off", initial: 0, wantTick: false, period: 0},
		{name: "negative is off", initial: -time.Second, wantTick: false, period: 0},
		{name: "on", initial: 10 * time.Millisecond, wantTick: true, period: 10 * time.Millisecond},
		{name: "turned off", initial: 10 * time.Millisecond, set: []time.Duration{0}, wantTick: false, period: 0},
		{name: "turned on", initial: 0, set: []time.Duration{10 * time.Millisecond}, wantTick: true, period: 10 * time.Millisecond},
		{name: "changes coalesce", initial: 0, set: []time.Duration{time.Hour, 0, 10 * time.Millisecond}, wantTick: true, period: 10 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tk := NewTicker(tt.initial)
			c := tk.Start()
			defer tk.Stop()
			for _, d := range tt.set {
				tk.Set(d)
			}
			if len(tt.set) > 0 {
				select {
				case <-tk.Changed():
					c = tk.Start()
				case <-time.After(time.Second):
					t.Fatal("Set did not signal Changed")
				}
				select {
				case <-tk.Changed():
					t.Fatal("several Sets signalled Changed more than once")
				default:
				}
			}
			if got := tk.Period(); got != tt.period {
				t.Errorf("Period() = %v, want %v", got, tt.period)
			}
			if (c != nil) != tt.wantTick {
				t.Fatalf("tick channel %v, want ticking %v", c, tt.wantTick)
			}
			if c != nil {
				select {
				case <-c:
				case <-time.After(time.Second):
					t.Fatal("no tick within a second at a 10ms period")
				}
			}
		})
	}
}

// Set must not block on an actor that is busy and has not read Changed.
func TestSetNeverBlocks(t *testing.T) {
	tk := NewTicker(0)
	done := make(chan struct{})
	go func() {
		for i := range 100 {
			tk.Set(time.Duration(i) * time.Second)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Set blocked with nobody reading Changed")
	}
	if got := tk.Period(); got != 99*time.Second {
		t.Errorf("Period() = %v, want the last Set (99s)", got)
	}
}
