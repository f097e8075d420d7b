// Package netnstest gives tests throwaway network namespaces: created with
// `ip netns add`, loopback up, deleted in t.Cleanup even when the test
// fails, and ways to reach into them (exec a command, dial a socket, an
// HTTP client) without moving the test's own threads.
//
// Design: dialing into a namespace runs on a fresh goroutine that locks its
// OS thread, switches the thread's namespace, dials and then exits while
// still locked, so the Go runtime discards the thread instead of reusing a
// thread left in the wrong namespace. A socket keeps the namespace it was
// created in.
//
// Thread safety: an NS may be used from parallel goroutines.
package netnstest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// NS is one test network namespace.
type NS struct {
	Name string
}

var seq atomic.Int64

// New creates a namespace named prefix-<pid>-<n>, with lo up.
func New(t testing.TB, prefix string) *NS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("network namespace tests need root (make test runs as root in CI)")
	}
	name := fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), seq.Add(1))
	if len(name) > 40 {
		name = name[:40]
	}
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	ns := &NS{Name: name}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Logf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	ns.MustRun(t, "ip", "link", "set", "lo", "up")
	return ns
}

// Command returns cmd name args... to be run inside the namespace.
func (n *NS) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// MustRun runs a command in the namespace and fails the test on error.
func (n *NS) MustRun(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := n.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("in %s: %s %s: %v\n%s", n.Name, name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Dial connects from inside the namespace.
func (n *NS) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread ends with this goroutine.
		h, err := netns.GetFromName(n.Name)
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			ch <- result{nil, err}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// inside runs fn on a fresh OS thread switched into the namespace, and
// throws the thread away afterwards (see the package doc).
func (n *NS) inside(fn func() error) error {
	return insideNS(func() (netns.NsHandle, error) { return netns.GetFromName(n.Name) }, fn)
}

// insideNS is inside for the namespace open returns.
func insideNS(open func() (netns.NsHandle, error), fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread ends with this goroutine.
		h, err := open()
		if err != nil {
			ch <- err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			ch <- err
			return
		}
		ch <- fn()
	}()
	return <-ch
}

// Listen opens a listener inside the namespace; it stays there.
func (n *NS) Listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	err := n.inside(func() (err error) {
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// ListenAt opens a listener inside the namespace at nsPath (a file such
// as /var/run/netns/<name> or /proc/<pid>/ns/net), one this package did
// not create; it stays there.
func ListenAt(nsPath, network, addr string) (net.Listener, error) {
	var l net.Listener
	err := insideNS(func() (netns.NsHandle, error) { return netns.GetFromPath(nsPath) }, func() (err error) {
		l, err = net.Listen(network, addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s in %s: %w", addr, nsPath, err)
	}
	return l, nil
}

// ListenPacket opens a packet socket inside the namespace.
func (n *NS) ListenPacket(network, addr string) (net.PacketConn, error) {
	var c net.PacketConn
	err := n.inside(func() (err error) {
		c, err = net.ListenPacket(network, addr)
		return err
	})
	return c, err
}

// DialFrom is Dial from a given local address of the namespace, with a
// timeout.
func (n *NS) DialFrom(ctx context.Context, network, local, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.inside(func() error {
		d := net.Dialer{}
		if local != "" {
			switch network {
			case "udp", "udp4", "udp6":
				d.LocalAddr = &net.UDPAddr{IP: net.ParseIP(local)}
			default:
				d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
			}
		}
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// HTTPClient returns a client whose connections start inside the namespace.
func (n *NS) HTTPClient() *http.Client {
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{DialContext: n.Dial, DisableKeepAlives: true},
	}
}

// Serve accepts connections on l until the test ends, when it closes l;
// handle serves each connection on a goroutine of its own, which closes
// the connection after it. A listener keeps the namespace it was made in,
// so a server inside a namespace is one made there (Dial's way) and served
// from anywhere.
func Serve(t testing.TB, l net.Listener, handle func(net.Conn)) {
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
}

// NetlinkAt is a netlink handle for the named namespace (under
// /var/run/netns), closed when the test ends.
func NetlinkAt(t testing.TB, name string) *netlink.Handle {
	t.Helper()
	h, err := netns.GetFromName(name)
	if err != nil {
		t.Fatalf("open netns %s: %v", name, err)
	}
	t.Cleanup(func() { h.Close() })
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatalf("netlink handle in %s: %v", name, err)
	}
	t.Cleanup(nl.Close)
	return nl
}

// Netlink is a netlink handle for n, closed when the test ends.
func (n *NS) Netlink(t testing.TB) *netlink.Handle { return NetlinkAt(t, n.Name) }
