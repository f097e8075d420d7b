package ctl

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/projectcalico/calico-node/internal/testkit/netnstest"
	"github.com/projectcalico/calico-node/internal/testkit/texttest"
)

// fakeAgent answers each connection on a unix socket with reply(the
// request line).
func fakeAgent(t *testing.T, reply func(req map[string]string) any) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "bgp.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	netnstest.Serve(t, l, func(c net.Conn) {
		line, _ := bufio.NewReader(c).ReadBytes('\n')
		var req map[string]string
		json.Unmarshal(line, &req)
		json.NewEncoder(c).Encode(reply(req))
	})
	return sock
}

// runCtl runs calicoctl in-process as the binary would (NormalizeArgs
// first) and returns its output and error.
func runCtl(args ...string) (string, error) {
	var out bytes.Buffer
	app := NewApp()
	app.Writer, app.ErrWriter = &out, &out
	app.ExitErrHandler = func(*cli.Context, error) {}
	err := app.Run(append([]string{"calicoctl"}, NormalizeArgs(args)...))
	return out.String(), err
}

// TestNodeBGPWhyCLI: flags after the prefix reach the sub-verb; the
// agent's answer is printed, its error is the command's error, and no
// agent gives node status's message and exit status.
func TestNodeBGPWhyCLI(t *testing.T) {
	got := NormalizeArgs([]string{"node", "bgp", "why", "10.244.2.0/26", "-o", "json", "--bgp-status-socket", "/s"})
	if want := []string{"node", "-o", "json", "--bgp-status-socket", "/s", "bgp", "why", "10.244.2.0/26"}; !slices.Equal(got, want) {
		t.Errorf("NormalizeArgs = %q, want %q", got, want)
	}

	var asked []map[string]string
	sock := fakeAgent(t, func(req map[string]string) any {
		asked = append(asked, req)
		switch req["query"] {
		case "routes":
			return map[string]any{"routes": map[string]any{"node": "n1", "routes": []map[string]any{{
				"prefix": "10.244.2.0/26", "nextHop": "192.0.2.12", "from": "192.0.2.12",
				"received": time.Now().Add(-61 * time.Second), "best": true, "kernel": "yes"}}}}
		default:
			return map[string]any{"error": "BGP is not running on this node"}
		}
	})
	out, err := runCtl("node", "routes", "--bgp-status-socket", sock)
	if err != nil {
		t.Fatalf("node routes: %v\n%s", err, out)
	}
	texttest.Contains(t, "node routes output", out, "|    PREFIX     |  NEXT HOP  |    FROM    |   AGE    | BEST | KERNEL |",
		"| 10.244.2.0/26 | 192.0.2.12 | 192.0.2.12 | 00:01:", " | yes  | yes    |")
	out, err = runCtl("node", "bgp", "why", "10.244.2.0/26", "--bgp-status-socket", sock)
	if err == nil || !strings.Contains(err.Error(), "BGP is not running on this node") {
		t.Errorf("bgp why with BGP off: %v\n%s", err, out)
	}
	if len(asked) != 2 || asked[1]["query"] != "why" || asked[1]["prefix"] != "10.244.2.0/26" {
		t.Errorf("requests %v", asked)
	}

	out, err = runCtl("node", "bgp", "why", "10.0.0.0/8", "--bgp-status-socket", filepath.Join(t.TempDir(), "none.sock"))
	if ec, ok := err.(cli.ExitCoder); !ok || ec.ExitCode() != 1 || !strings.Contains(out, "Calico process is not running.") {
		t.Errorf("no agent: %v, output %q", err, out)
	}
	if _, err := runCtl("node", "routes", "-o", "yaml", "--bgp-status-socket", sock); err == nil || !strings.Contains(err.Error(), `unknown output format "yaml"`) {
		t.Errorf("-o yaml: %v", err)
	}
	if _, err := runCtl("node", "bgp", "why", "--bgp-status-socket", sock); err == nil || !strings.Contains(err.Error(), "usage: calicoctl node bgp why PREFIX") {
		t.Errorf("no prefix: %v", err)
	}
}
