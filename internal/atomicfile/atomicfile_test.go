package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		old     string // "" for no file yet
		perm    os.FileMode
		wantErr bool
	}{
		{name: "new file", perm: 0o644},
		{name: "replaces", old: "old content", perm: 0o600},
		{name: "missing directory", perm: 0o644, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f.json")
			if tc.wantErr {
				path = filepath.Join(dir, "missing", "f.json")
			}
			if tc.old != "" {
				if err := os.WriteFile(path, []byte(tc.old), 0o666); err != nil {
					t.Fatal(err)
				}
			}
			err := WriteFile(path, []byte("new"), tc.perm)
			if tc.wantErr {
				if err == nil {
					t.Fatal("WriteFile into a missing directory succeeded")
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				got, err := os.ReadFile(path)
				if err != nil || string(got) != "new" {
					t.Errorf("content %q, %v; want %q", got, err, "new")
				}
				if st, err := os.Stat(path); err != nil {
					t.Error(err)
				} else if st.Mode().Perm() != tc.perm {
					t.Errorf("mode %v, want %v", st.Mode().Perm(), tc.perm)
				}
			}
			// No temporary file is left beside the target.
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if e.Name() != "f.json" {
					t.Errorf("left behind: %s", e.Name())
				}
			}
		})
	}
}
