package controllers

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// TestDebugProfilePort: the leader serves pprof on localhost at
// KubeControllersConfiguration's debugProfilePort, and stops when it is
// set back to 0.
func TestDebugProfilePort(t *testing.T) {
	e := newEnv(t)
	ln, err := net.Listen("tcp", "localhost:0")
	if err != nil {
		t.Fatal(err)
	}
	port := int32(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	url := fmt.Sprintf("http://localhost:%d/debug/pprof/", port)
	e.create(t, kcc(func(s *api.KubeControllersConfigurationSpec) { s.DebugProfilePort = &port }))
	e.start(t, e.fastConfig("prof", LoadBalancer))
	client := &http.Client{Timeout: 5 * time.Second}
	eventually(t, 30*time.Second, func() error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine") {
			return fmt.Errorf("GET %s: %s %.80q", url, resp.Status, body)
		}
		return nil
	})
	e.setKCC(t, func(s *api.KubeControllersConfigurationSpec) { s.DebugProfilePort = nil })
	eventually(t, 30*time.Second, func() error {
		resp, err := client.Get(url)
		if err != nil {
			return nil // refused: stopped
		}
		resp.Body.Close()
		return fmt.Errorf("GET %s still answers (%s) with debugProfilePort unset", url, resp.Status)
	})
}
