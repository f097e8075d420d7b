package overlay

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// manualGate is a Gate the test opens and closes.
type manualGate struct {
	mu      sync.Mutex
	open    bool
	changed chan struct{}
}

func newManualGate(open bool) *manualGate {
	return &manualGate{open: open, changed: make(chan struct{})}
}

func (g *manualGate) State() (bool, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open, g.changed
}

func (g *manualGate) set(open bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = open
	close(g.changed)
	g.changed = make(chan struct{})
}

// TestPausedWhileLocked: with the datastore locked the actor allocates no
// tunnel address and creates no device, yet reports ready (as Felix does
// while it waits); the unlock makes it do both.
func TestPausedWhileLocked(t *testing.T) {
	l := newLab(t, threeNodes[0])
	l.ds.apply(t, testPool("pool1", "10.244.0.0/16", vxlanMode(api.VXLANModeAlways)))
	gate := newManualGate(false)
	l.startGated("node1", gate)
	n := l.nodes["node1"]
	eventually(t, "paused and ready", func() error {
		if _, ready, detail := n.health.get(); !ready || !strings.Contains(detail, "paused") {
			return fmt.Errorf("ready=%v detail=%q", ready, detail)
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond)
	if node := l.nodeOf("node1"); node.Spec.IPv4VXLANTunnelAddr != "" {
		t.Errorf("tunnel address allocated while locked: %s", node.Spec.IPv4VXLANTunnelAddr)
	}
	if _, err := n.nl.LinkByName(VXLANDevice); err == nil {
		t.Errorf("%s created while locked", VXLANDevice)
	} else if _, notFound := err.(netlink.LinkNotFoundError); !notFound {
		t.Fatal(err)
	}

	gate.set(true)
	l.waitVTEPs("node1")
	eventually(t, VXLANDevice+" created after the unlock", func() error {
		_, err := n.nl.LinkByName(VXLANDevice)
		return err
	})
}
