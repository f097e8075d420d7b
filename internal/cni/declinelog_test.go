package cni

import (
	"testing"
	"time"
)

// TestDeclineLog: each reason is logged at once, then at most once per
// declineLogEvery, the next line saying how many went unlogged; reasons
// do not hold each other back.
func TestDeclineLog(t *testing.T) {
	var l declineLog
	t0 := time.Unix(1000, 0)
	steps := []struct {
		reason     string
		at         time.Duration
		log        bool
		wantMissed int
	}{
		{declineIPAM, 0, true, 0},
		{declineIPAM, time.Second, false, 0},
		{declineIPAM, 2 * time.Second, false, 0},
		{declineFile, 3 * time.Second, true, 0},
		{declineIPAM, declineLogEvery + time.Second, true, 2},
		{declineIPAM, declineLogEvery + 2*time.Second, false, 0},
	}
	for i, s := range steps {
		log, missed := l.note(s.reason, t0.Add(s.at))
		if log != s.log || missed != s.wantMissed {
			t.Errorf("step %d (%s at %v): log %v missed %d, want %v %d", i, s.reason, s.at, log, missed, s.log, s.wantMissed)
		}
	}
}
