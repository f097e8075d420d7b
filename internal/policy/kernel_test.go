package policy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/projectcalico/calico-node/internal/policy"
)

// TestKernelAcceptsPayloads loads every golden case's IP sets and
// iptables payloads into a throwaway network namespace, so that a rule
// the kernel or iptables-restore would reject fails here rather than on a
// node. It needs root, unshare, ipset and iptables-restore; it is skipped
// without them.
func TestKernelAcceptsPayloads(t *testing.T) {
	needNetns(t, "ipset", "iptables-restore", "ip6tables-restore")
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			s := base()
			tc.edit(s)
			res := policy.Compile(s)
			dir := t.TempDir()
			var sets string
			script := "set -e\n"
			for _, f := range []*policy.Family{res.V4, res.V6} {
				if f == nil {
					continue
				}
				sets += policy.RenderIPSets(f.IPSets, 0)
				restore := "iptables-restore"
				if f.Version == 6 {
					restore = "ip6tables-restore"
				}
				for _, tbl := range f.Tables() {
					path := filepath.Join(dir, tbl.Name+itoa(f.Version))
					if err := os.WriteFile(path, []byte(policy.Render(tbl.Name, tbl.Chains, tbl.Hooks...)), 0o644); err != nil {
						t.Fatal(err)
					}
					// Twice: a second identical restore must succeed too
					// (chains flushed and refilled, sets swapped).
					script += restore + " --noflush " + path + "\n" + restore + " --noflush " + path + "\n"
				}
			}
			setsPath := filepath.Join(dir, "sets")
			if err := os.WriteFile(setsPath, []byte(sets), 0o644); err != nil {
				t.Fatal(err)
			}
			script = "ipset restore -f " + setsPath + "\nipset restore -f " + setsPath + "\n" + script
			out, err := exec.Command("unshare", "-n", "sh", "-c", script).CombinedOutput()
			if err != nil {
				t.Errorf("loading the payload failed: %v\n%s", err, out)
			}
		})
	}
}
