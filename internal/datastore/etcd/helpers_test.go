package etcd

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
)

// backends are the etcd servers every store test runs against: Debian's
// etcd 3.4 binary and the embedded 3.7 server the product ships.
var backends = []struct {
	name  string
	start func(testing.TB, ...etcdtest.Option) *etcdtest.Server
}{
	{"etcd-binary", etcdtest.Start},
	{"etcd-embedded", etcdtest.StartEmbedded},
}

// forEachBackend runs f as a subtest against a fresh server of each kind.
func forEachBackend(t *testing.T, f func(t *testing.T, srv *etcdtest.Server)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			f(t, b.start(t))
		})
	}
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func configFor(srv *etcdtest.Server) datastore.Config {
	return datastore.Config{
		Endpoints:   srv.Endpoints,
		CACertFile:  srv.CACertFile,
		CertFile:    srv.CertFile,
		KeyFile:     srv.KeyFile,
		DialTimeout: 5 * time.Second,
	}
}

func openStore(t *testing.T, srv *etcdtest.Server) *Store {
	t.Helper()
	s, err := New(testCtx(t), configFor(srv))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// decodeDoc turns a YAML or JSON document into the object of its kind.
func decodeDoc(t *testing.T, doc string) api.Object {
	t.Helper()
	data, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatalf("yaml to json: %v\n%s", err, doc)
	}
	var tm api.TypeMeta
	if err := json.Unmarshal(data, &tm); err != nil {
		t.Fatalf("decode type: %v", err)
	}
	info, ok := api.LookupKind(tm.Kind)
	if !ok {
		t.Fatalf("unknown kind %q in\n%s", tm.Kind, doc)
	}
	obj := info.New()
	if err := json.Unmarshal(data, obj); err != nil {
		t.Fatalf("decode %s: %v", tm.Kind, err)
	}
	return obj
}

func toJSON(t *testing.T, obj any) string {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return string(data)
}

// referenceKV is one key and value of the reference capture.
type referenceKV struct{ key, value string }

// readReference loads testdata/calico-3.31-etcd-layout.txt: what real
// Calico v3.31 wrote to etcd, as alternating key and value lines.
func readReference(t *testing.T) []referenceKV {
	t.Helper()
	f, err := os.Open("testdata/calico-3.31-etcd-layout.txt")
	if err != nil {
		t.Fatalf("open reference: %v", err)
	}
	defer f.Close()
	var kvs []referenceKV
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var key string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case key == "":
			key = line
		default:
			kvs = append(kvs, referenceKV{key, line})
			key = ""
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("read reference: %v", err)
	}
	return kvs
}

func referenceValue(t *testing.T, key string) string {
	t.Helper()
	for _, kv := range readReference(t) {
		if kv.key == key {
			return kv.value
		}
	}
	t.Fatalf("reference has no key %s", key)
	return ""
}

// rawGet reads a key with the raw client.
func rawGet(t *testing.T, s *Store, key string) (string, int64) {
	t.Helper()
	resp, err := s.Etcd().Get(testCtx(t), key)
	if err != nil {
		t.Fatalf("raw get %s: %v", key, err)
	}
	if len(resp.Kvs) == 0 {
		t.Fatalf("raw get %s: no such key", key)
	}
	return string(resp.Kvs[0].Value), resp.Kvs[0].ModRevision
}

// nextEvent waits for the next event that is not an error report.
func nextEvent(t *testing.T, ch <-chan datastore.Event) datastore.Event {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("watch channel closed")
			}
			if ev.Err != nil {
				t.Logf("watch error event: %v", ev.Err)
				continue
			}
			return ev
		case <-timeout:
			t.Fatal("no watch event within 20s")
		}
	}
}

func names(objs []api.Object) []string {
	var out []string
	for _, o := range objs {
		m := o.Meta()
		if m.Namespace != "" {
			out = append(out, m.Namespace+"/"+m.Name)
		} else {
			out = append(out, m.Name)
		}
	}
	return out
}
