package epstatus

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// Felix's names (libcalico-go names.WorkloadEndpointKeyToStatusFilename),
// which Calico's own CNI plugin looks for.
func TestFileName(t *testing.T) {
	cni := api.WorkloadEndpoint{ObjectMeta: api.ObjectMeta{Namespace: "default"},
		Spec: api.WorkloadEndpointSpec{Orchestrator: api.OrchestratorCNI, ContainerID: "0123abcd", Endpoint: "eth0"}}
	k8s := wep("node-1", "kube-system", "coredns-5d78c9869d-x2x7q", "c1", "1", "cali1")
	k8s.Spec.Endpoint = "net1"
	other := api.WorkloadEndpoint{ObjectMeta: api.ObjectMeta{Namespace: "openstack"},
		Spec: api.WorkloadEndpointSpec{Orchestrator: "openstack", Workload: "vm 1", Endpoint: "tap0"}}
	for _, tc := range []struct {
		w    api.WorkloadEndpoint
		want string
	}{
		{k8s, "k8s kube-system%2Fcoredns-5d78c9869d-x2x7q net1"},
		{cni, "cni default%2F0123abcd eth0"},
		{other, "openstack openstack%2Fvm%201 tap0"},
	} {
		if got := FileName(&tc.w); got != tc.want {
			t.Errorf("FileName = %q, want %q", got, tc.want)
		}
	}
}

func TestFileWriter(t *testing.T) {
	dir := filepath.Join(t.TempDir(), DirName)
	a := wep("n1", "default", "a", "c1", "11", "cali1", "10.0.0.1/32")
	b := wep("n1", "default", "b", "c2", "12", "cali2", "10.0.0.2/32")
	// Left by an earlier agent, and someone else's temporary file.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "k8s default%2Fgone eth0"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, ".x.tmp1"), nil, 0o644)

	f := &fileWriter{dir: dir, node: "n1"}
	if err := f.sync(map[Key]*api.WorkloadEndpoint{KeyOf(&a): &a, KeyOf(&b): &b}, true); err != nil {
		t.Fatal(err)
	}
	if got, want := ls(t, dir), []string{".agent", ".x.tmp1", FileName(&a), FileName(&b)}; !slices.Equal(got, want) {
		t.Fatalf("directory = %q, want %q", got, want)
	}
	if node, ok := ReadMarker(dir); !ok || node != "n1" {
		t.Errorf("marker = %q %v", node, ok)
	}
	for _, tc := range []struct {
		name string
		w    api.WorkloadEndpoint
		want bool
	}{
		{"same revision", a, true},
		{"older revision asked", func() api.WorkloadEndpoint { w := a; w.ResourceVersion = "9"; return w }(), true},
		{"newer revision asked", func() api.WorkloadEndpoint { w := a; w.ResourceVersion = "13"; return w }(), false},
		{"the next sandbox", func() api.WorkloadEndpoint { w := a; w.Spec.ContainerID = "c7"; w.ResourceVersion = "11"; return w }(), false},
		{"no file", wep("n1", "default", "z", "c9", "1", "cali9"), false},
	} {
		ok, err := FileProgrammed(dir, &tc.w)
		if err != nil || ok != tc.want {
			t.Errorf("%s: FileProgrammed = %v, %v; want %v", tc.name, ok, err, tc.want)
		}
	}

	// b is deleted, a gets a new revision.
	a2 := a
	a2.ResourceVersion = "15"
	if err := f.sync(map[Key]*api.WorkloadEndpoint{KeyOf(&a2): &a2}, false); err != nil {
		t.Fatal(err)
	}
	if got, want := ls(t, dir), []string{".agent", ".x.tmp1", FileName(&a)}; !slices.Equal(got, want) {
		t.Fatalf("directory = %q, want %q", got, want)
	}
	if ok, _ := FileProgrammed(dir, &a2); !ok {
		t.Error("the file was not rewritten with the new revision")
	}
}

// Felix writes empty files: they count as programmed.
func TestFileProgrammedFelixFile(t *testing.T) {
	dir := t.TempDir()
	w := wep("n1", "default", "a", "c1", "11", "cali1")
	if err := os.WriteFile(filepath.Join(dir, FileName(&w)), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, err := FileProgrammed(dir, &w); !ok || err != nil {
		t.Errorf("FileProgrammed on felix's empty file = %v, %v", ok, err)
	}
	if _, ok := ReadMarker(dir); ok {
		t.Error("a directory without a marker reads as marked")
	}
}

func TestStatusDir(t *testing.T) {
	for prefix, want := range map[string]string{"": DefaultDir, "/run/x": "/run/x/endpoint-status", "none": ""} {
		if got := statusDir(prefix); got != want {
			t.Errorf("statusDir(%q) = %q, want %q", prefix, got, want)
		}
	}
}

func ls(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}
