package epstatus

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/projectcalico/calico-node/internal/atomicfile"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// Where the status files live, as in Calico: felix's
// endpointStatusPathPrefix (FELIX_ENDPOINTSTATUSPATHPREFIX) plus DirName;
// the CNI config's endpoint_status_dir names the same directory.
const (
	DefaultPathPrefix = "/var/run/calico"
	DirName           = "endpoint-status"
	DefaultDir        = DefaultPathPrefix + "/" + DirName
	// MarkerName is the file naming the node whose agent keeps the
	// directory. Its leading dot keeps it apart from status files (whose
	// names never start with one) and from felix's reconciliation.
	MarkerName = ".agent"
	// Disabled as endpointStatusPathPrefix turns the files off (Calico
	// uses an empty value, which the FELIX_* environment cannot express).
	Disabled = "none"
)

// FileName is felix's name for w's status file: orchestrator,
// "<namespace>/<workload>" and endpoint, each url.PathEscape'd, joined by
// spaces (libcalico-go's WorkloadEndpointKeyToStatusFilename). The
// workload is the pod for Kubernetes, the container ID for plain CNI.
func FileName(w *api.WorkloadEndpoint) string {
	workload := w.Spec.Workload
	switch w.Spec.Orchestrator {
	case api.OrchestratorKubernetes:
		workload = w.Spec.Pod
	case api.OrchestratorCNI:
		workload = w.Spec.ContainerID
	case api.OrchestratorDocker:
		workload = w.Spec.Orchestrator
	}
	return url.PathEscape(w.Spec.Orchestrator) + " " + url.PathEscape(w.Namespace+"/"+workload) + " " + url.PathEscape(w.Spec.Endpoint)
}

// File is a status file's content. Felix writes the files empty; ours
// say which version of the endpoint is programmed.
type File struct {
	Node        string `json:"node"`
	Namespace   string `json:"namespace"`
	Endpoint    string `json:"endpoint"`
	ContainerID string `json:"containerID,omitempty"`
	Revision    string `json:"revision"`
}

func fileFor(w *api.WorkloadEndpoint) []byte {
	b, _ := json.Marshal(File{Node: w.Spec.Node, Namespace: w.Namespace, Endpoint: w.Name, ContainerID: w.Spec.ContainerID, Revision: w.ResourceVersion})
	return append(b, '\n')
}

// FileProgrammed reports whether dir's status file says w is programmed
// at w's revision or later. An empty file (felix's) counts: it says the
// endpoint is programmed, not which version.
func FileProgrammed(dir string, w *api.WorkloadEndpoint) (bool, error) {
	data, err := os.ReadFile(filepath.Join(dir, FileName(w)))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("endpoint status file: %w", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return true, nil
	}
	var f File
	if err := json.Unmarshal(data, &f); err != nil {
		return false, fmt.Errorf("endpoint status file %s: %w", FileName(w), err)
	}
	if f.ContainerID != "" && w.Spec.ContainerID != "" && f.ContainerID != w.Spec.ContainerID {
		return false, nil // the previous sandbox's
	}
	return revision(f.Revision) >= revision(w.ResourceVersion), nil
}

// Marker is the marker file's content.
type Marker struct {
	Node string `json:"node"`
}

// ReadMarker is the node whose agent keeps dir; ok is false when no agent
// has marked it (none has run since the directory was made: on a node,
// since boot, /var/run being a tmpfs).
func ReadMarker(dir string) (node string, ok bool) {
	data, err := os.ReadFile(filepath.Join(dir, MarkerName))
	if err != nil {
		return "", false
	}
	var m Marker
	if json.Unmarshal(data, &m) != nil || m.Node == "" {
		return "", false
	}
	return m.Node, true
}

// statusDir is the directory the files go to for prefix, "" when they
// are off.
func statusDir(prefix string) string {
	switch strings.TrimSpace(prefix) {
	case Disabled:
		return ""
	case "":
		prefix = DefaultPathPrefix
	}
	return filepath.Join(prefix, DirName)
}

// fileWriter keeps one status directory equal to the programmed set.
// Owned by Run.
type fileWriter struct {
	dir     string
	node    string
	written map[string]string // name -> content this writer last wrote
	marked  bool
}

// mark writes the marker (and makes the directory).
func (f *fileWriter) mark() error {
	if f.marked {
		return nil
	}
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return fmt.Errorf("endpoint status directory: %w", err)
	}
	b, _ := json.Marshal(Marker{Node: f.node})
	if err := atomicfile.WriteFile(filepath.Join(f.dir, MarkerName), append(b, '\n'), 0o644); err != nil {
		return err
	}
	f.marked = true
	return nil
}

// sync writes a file per programmed endpoint and removes every other
// status file (a deleted endpoint's, or one left by an earlier agent).
// full re-reads the directory instead of trusting what was written.
func (f *fileWriter) sync(programmed map[Key]*api.WorkloadEndpoint, full bool) error {
	if err := f.mark(); err != nil {
		return err
	}
	want := make(map[string][]byte, len(programmed))
	for _, w := range programmed {
		want[FileName(w)] = fileFor(w)
	}
	if full || f.written == nil {
		entries, err := os.ReadDir(f.dir)
		if err != nil {
			return fmt.Errorf("endpoint status directory: %w", err)
		}
		f.written = map[string]string{}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") || e.IsDir() {
				continue // the marker, atomicfile's temporaries
			}
			if data, err := os.ReadFile(filepath.Join(f.dir, e.Name())); err == nil {
				f.written[e.Name()] = string(data)
			}
		}
	}
	var errs []error
	for name := range f.written {
		if _, ok := want[name]; ok {
			continue
		}
		if err := os.Remove(filepath.Join(f.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove endpoint status file: %w", err))
			continue
		}
		delete(f.written, name)
	}
	for name, data := range want {
		if f.written[name] == string(data) {
			continue
		}
		if err := atomicfile.WriteFile(filepath.Join(f.dir, name), data, 0o644); err != nil {
			errs = append(errs, err)
			delete(f.written, name)
			continue
		}
		f.written[name] = string(data)
	}
	return errors.Join(errs...)
}
