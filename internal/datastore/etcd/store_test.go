package etcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/etcdtest"
	"github.com/projectcalico/calico-node/internal/testkit/texttest"
)

// crudDocs are valid resources of several kinds, global and namespaced.
var crudDocs = []struct {
	name, doc string
	key       string // etcd key the resource must be stored under
}{
	{"IPPool", `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"pool1"},
		"spec":{"cidr":"10.244.0.0/16","blockSize":26,"ipipMode":"Never","vxlanMode":"Never","natOutgoing":true,"nodeSelector":"all()"}}`,
		Prefix + "ippools/pool1"},
	{"Node", `{"kind":"Node","apiVersion":"projectcalico.org/v3","metadata":{"name":"node1"},"spec":{"bgp":{"ipv4Address":"127.0.0.1/8"}}}`,
		Prefix + "nodes/node1"},
	{"BGPPeer", `{"kind":"BGPPeer","apiVersion":"projectcalico.org/v3","metadata":{"name":"peer1"},"spec":{"peerIP":"127.0.0.2","asNumber":64513,"filters":["f1"]}}`,
		Prefix + "bgppeers/peer1"},
	{"GlobalNetworkPolicy", `{"kind":"GlobalNetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"allow-dns"},
		"spec":{"order":100,"selector":"all()","types":["Egress"],"egress":[{"action":"Allow","protocol":"UDP","destination":{"ports":[53]}}]}}`,
		Prefix + "globalnetworkpolicies/default.allow-dns"},
	{"NetworkPolicy", `{"kind":"NetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":"allow-web","namespace":"default"},
		"spec":{"order":200,"selector":"app == \"web\"","types":["Ingress"],"ingress":[{"action":"Allow","protocol":"TCP","destination":{"ports":[80]}}]}}`,
		Prefix + "networkpolicies/default/default.allow-web"},
	{"NetworkSet", `{"kind":"NetworkSet","apiVersion":"projectcalico.org/v3","metadata":{"name":"dbs","namespace":"prod","labels":{"role":"db"}},
		"spec":{"nets":["10.1.0.0/16"]}}`,
		Prefix + "networksets/prod/dbs"},
	{"HostEndpoint", `{"kind":"HostEndpoint","apiVersion":"projectcalico.org/v3","metadata":{"name":"node1-eth0","labels":{"host":"node1"}},
		"spec":{"node":"node1","interfaceName":"eth0","expectedIPs":["192.0.2.10"]}}`,
		Prefix + "hostendpoints/node1-eth0"},
	{"Profile", `{"kind":"Profile","apiVersion":"projectcalico.org/v3","metadata":{"name":"k8s-pod-network"},
		"spec":{"ingress":[{"action":"Allow","source":{"selector":"has(k8s-pod-network)"}}],"egress":[{"action":"Allow"}],"labelsToApply":{"k8s-pod-network":""}}}`,
		Prefix + "profiles/k8s-pod-network"},
	{"WorkloadEndpoint", `{"kind":"WorkloadEndpoint","apiVersion":"projectcalico.org/v3",
		"metadata":{"name":"node1-cni-probecontainer000-eth0","namespace":"default","labels":{"projectcalico.org/namespace":"default","projectcalico.org/orchestrator":"cni"}},
		"spec":{"orchestrator":"cni","node":"node1","containerID":"probecontainer000","endpoint":"eth0","ipNetworks":["10.244.166.128/32"],"profiles":["k8s-pod-network"],"interfaceName":"caliprobecontai","mac":"f6:b0:f3:38:94:1f"}}`,
		Prefix + "workloadendpoints/default/node1-cni-probecontainer000-eth0"},
	{"BGPFilter", `{"kind":"BGPFilter","apiVersion":"projectcalico.org/v3","metadata":{"name":"f1"},
		"spec":{"exportV4":[{"action":"Reject","matchOperator":"In","cidr":"10.244.2.0/24"}],"importV6":[{"action":"Accept","matchOperator":"NotIn","cidr":"fd00::/8","prefixLength":{"min":48,"max":64}}]}}`,
		Prefix + "bgpfilters/f1"},
}

func TestCRUD(t *testing.T) {
	forEachBackend(t, func(t *testing.T, srv *etcdtest.Server) {
		s := openStore(t, srv)
		ctx := testCtx(t)
		for _, tc := range crudDocs {
			t.Run(tc.name, func(t *testing.T) {
				in := decodeDoc(t, tc.doc)
				inJSON := toJSON(t, in)
				kind, ns, name := in.Type().Kind, in.Meta().Namespace, in.Meta().Name

				created, err := s.Create(ctx, in)
				if err != nil {
					t.Fatalf("Create: %v", err)
				}
				if got := toJSON(t, in); got != inJSON {
					t.Errorf("Create modified its argument:\n got %s\nwant %s", got, inJSON)
				}
				cm := created.Meta()
				if cm.Name != name || cm.Namespace != ns {
					t.Errorf("created %s/%s, want %s/%s", cm.Namespace, cm.Name, ns, name)
				}
				if cm.UID == "" {
					t.Error("created object has no uid")
				}
				if _, err := time.Parse(time.RFC3339, cm.CreationTimestamp); err != nil {
					t.Errorf("creationTimestamp %q: %v", cm.CreationTimestamp, err)
				}
				raw, modRev := rawGet(t, s, tc.key)
				if cm.ResourceVersion != strconv.FormatInt(modRev, 10) {
					t.Errorf("resourceVersion %q, want key's mod revision %d", cm.ResourceVersion, modRev)
				}
				if strings.Contains(raw, "resourceVersion") {
					t.Errorf("stored value has a resourceVersion: %s", raw)
				}

				got, err := s.Get(ctx, kind, ns, name)
				if err != nil {
					t.Fatalf("Get: %v", err)
				}
				if toJSON(t, got) != toJSON(t, created) {
					t.Errorf("Get returned\n%s\nCreate returned\n%s", toJSON(t, got), toJSON(t, created))
				}

				list, _, err := s.List(ctx, kind, ns)
				if err != nil {
					t.Fatalf("List: %v", err)
				}
				if kind == "Profile" {
					// Calico's projectcalico-default-allow is always there.
					list = slices.DeleteFunc(list, func(o api.Object) bool { return o.Meta().Name == datastore.DefaultAllowProfileName })
				}
				if len(list) != 1 || toJSON(t, list[0]) != toJSON(t, created) {
					t.Errorf("List = %s, want just the created object", toJSON(t, list))
				}

				// Update with the read version: a CAS write.
				got.Meta().Labels = map[string]string{"changed": "yes"}
				updated, err := s.Update(ctx, got)
				if err != nil {
					t.Fatalf("Update: %v", err)
				}
				um := updated.Meta()
				if um.Labels["changed"] != "yes" {
					t.Errorf("updated labels = %v", um.Labels)
				}
				if um.UID != cm.UID || um.CreationTimestamp != cm.CreationTimestamp {
					t.Errorf("Update changed identity: uid %s->%s, created %s->%s", cm.UID, um.UID, cm.CreationTimestamp, um.CreationTimestamp)
				}
				if rv(t, updated) <= rv(t, created) {
					t.Errorf("resourceVersion did not grow: %s -> %s", cm.ResourceVersion, um.ResourceVersion)
				}

				// Update without a version overwrites, but keeps the
				// stored identity even if the caller sends another one.
				blind := decodeDoc(t, tc.doc)
				blind.Meta().UID = "not-the-stored-uid"
				blind.Meta().Labels = map[string]string{"changed": "again"}
				blindOut, err := s.Update(ctx, blind)
				if err != nil {
					t.Fatalf("Update without resourceVersion: %v", err)
				}
				if blindOut.Meta().UID != cm.UID || blindOut.Meta().Labels["changed"] != "again" {
					t.Errorf("blind update = %s", toJSON(t, blindOut))
				}

				deleted, err := s.Delete(ctx, tc.name, ns, name, "")
				if err != nil {
					t.Fatalf("Delete: %v", err)
				}
				if toJSON(t, deleted) != toJSON(t, blindOut) {
					t.Errorf("Delete returned\n%s\nwant the last stored state\n%s", toJSON(t, deleted), toJSON(t, blindOut))
				}
				if _, err := s.Get(ctx, kind, ns, name); !errors.Is(err, datastore.ErrNotFound) {
					t.Errorf("Get after Delete: err = %v, want ErrNotFound", err)
				}
			})
		}
	})
}

func rv(t *testing.T, obj api.Object) int64 {
	t.Helper()
	n, err := strconv.ParseInt(obj.Meta().ResourceVersion, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", obj.Meta().ResourceVersion, err)
	}
	return n
}

func TestApply(t *testing.T) {
	forEachBackend(t, func(t *testing.T, srv *etcdtest.Server) {
		s := openStore(t, srv)
		ctx := testCtx(t)
		doc := crudDocs[0].doc
		first, err := s.Apply(ctx, decodeDoc(t, doc))
		if err != nil {
			t.Fatalf("Apply (create): %v", err)
		}
		again := decodeDoc(t, doc)
		again.Meta().Labels = map[string]string{"v": "2"}
		second, err := s.Apply(ctx, again)
		if err != nil {
			t.Fatalf("Apply (update): %v", err)
		}
		if second.Meta().UID != first.Meta().UID || second.Meta().Labels["v"] != "2" {
			t.Errorf("Apply over existing = %s", toJSON(t, second))
		}
		// With a stale version Apply is a CAS update.
		stale := decodeDoc(t, doc)
		stale.Meta().ResourceVersion = first.Meta().ResourceVersion
		if _, err := s.Apply(ctx, stale); !errors.Is(err, datastore.ErrConflict) {
			t.Errorf("Apply with stale resourceVersion: err = %v, want ErrConflict", err)
		}
	})
}

func TestListNamespaces(t *testing.T) {
	forEachBackend(t, func(t *testing.T, srv *etcdtest.Server) {
		s := openStore(t, srv)
		ctx := testCtx(t)
		for _, nsName := range []string{"b/zeta", "a/web", "b/alpha", "a/api"} {
			ns, name, _ := strings.Cut(nsName, "/")
			doc := fmt.Sprintf(`{"kind":"NetworkPolicy","apiVersion":"projectcalico.org/v3","metadata":{"name":%q,"namespace":%q},"spec":{"selector":"all()"}}`, name, ns)
			if _, err := s.Create(ctx, decodeDoc(t, doc)); err != nil {
				t.Fatalf("Create %s: %v", nsName, err)
			}
		}
		pool := decodeDoc(t, crudDocs[0].doc)
		if _, err := s.Create(ctx, pool); err != nil {
			t.Fatalf("Create pool: %v", err)
		}
		tests := []struct {
			kind, namespace string
			want            []string
		}{
			{"networkpolicies", "", []string{"a/api", "a/web", "b/alpha", "b/zeta"}},
			{"NetworkPolicy", "b", []string{"b/alpha", "b/zeta"}},
			{"np", "c", nil},
			{"ippool", "ignored-for-global-kinds", []string{"pool1"}},
		}
		for _, tc := range tests {
			objs, rev, err := s.List(ctx, tc.kind, tc.namespace)
			if err != nil {
				t.Fatalf("List(%s, %q): %v", tc.kind, tc.namespace, err)
			}
			if got := names(objs); !slices.Equal(got, tc.want) {
				t.Errorf("List(%s, %q) = %v, want %v", tc.kind, tc.namespace, got, tc.want)
			}
			if rev <= 0 {
				t.Errorf("List revision = %d", rev)
			}
		}
	})
}

// TestStoredShape writes the documents a user applied to real Calico and
// compares the bytes in etcd with what Calico v3.31 stored for them.
func TestStoredShape(t *testing.T) {
	forEachBackend(t, func(t *testing.T, srv *etcdtest.Server) {
		s := openStore(t, srv)
		ctx := testCtx(t)
		tests := []struct{ yamlFile, key string }{
			{"01-node.yaml", Prefix + "nodes/node1"},
			{"02-ippool.yaml", Prefix + "ippools/pool1"},
			{"03-bgppeer.yaml", Prefix + "bgppeers/peer1"},
			{"04-gnp.yaml", Prefix + "globalnetworkpolicies/default.allow-dns"},
			{"05-np.yaml", Prefix + "networkpolicies/default/default.allow-web"},
		}
		for _, tc := range tests {
			t.Run(tc.yamlFile, func(t *testing.T) {
				doc, err := os.ReadFile(filepath.Join("testdata", "calico-3.31-yaml", tc.yamlFile))
				if err != nil {
					t.Fatal(err)
				}
				want := referenceValue(t, tc.key)
				// Normalise what is random: take uid and timestamp from
				// the reference capture.
				uid, created := storedIdentity([]byte(want))
				s.newUID = func() string { return uid }
				s.now = func() time.Time { tm, _ := time.Parse(time.RFC3339, created); return tm }

				if _, err := s.Create(ctx, decodeDoc(t, string(doc))); err != nil {
					t.Fatalf("Create: %v", err)
				}
				got, _ := rawGet(t, s, tc.key)
				if got != want {
					t.Errorf("stored value differs from Calico v3.31's\n got %s\nwant %s", got, want)
				}
			})
		}
	})
}

// TestReadCalicoWritten puts what real Calico v3.31 wrote into etcd, reads it
// through the store, and writes it back: the bytes must not change.
func TestReadCalicoWritten(t *testing.T) {
	forEachBackend(t, func(t *testing.T, srv *etcdtest.Server) {
		s := openStore(t, srv)
		ctx := testCtx(t)
		var resources []referenceKV
		for _, kv := range readReference(t) {
			if _, err := s.Etcd().Put(ctx, kv.key, kv.value); err != nil {
				t.Fatalf("put %s: %v", kv.key, err)
			}
			if strings.HasPrefix(kv.key, Prefix) {
				resources = append(resources, kv)
			}
		}
		wantNames := map[string]string{
			Prefix + "globalnetworkpolicies/default.allow-dns":                    "allow-dns",
			Prefix + "networkpolicies/default/default.allow-web":                  "allow-web",
			Prefix + "workloadendpoints/default/node1-cni-probecontainer000-eth0": "node1-cni-probecontainer000-eth0",
		}
		for _, kv := range resources {
			t.Run(strings.TrimPrefix(kv.key, Prefix), func(t *testing.T) {
				k, ns, etcdName, known, err := s.kinds.parseKey(kv.key)
				if !known || err != nil {
					t.Fatalf("parseKey(%s): known %v, err %v", kv.key, known, err)
				}
				name := etcdName
				if want, ok := wantNames[kv.key]; ok {
					name = want
				}
				obj, err := s.Get(ctx, k.info.Kind, ns, name)
				if err != nil {
					t.Fatalf("Get(%s, %q, %q): %v", k.info.Kind, ns, name, err)
				}
				m := obj.Meta()
				if m.Name != name || m.Namespace != ns {
					t.Errorf("read %s/%s, want %s/%s", m.Namespace, m.Name, ns, name)
				}
				if _, ok := m.Annotations[metadataAnnotation]; ok {
					t.Errorf("the user sees the internal annotation: %v", m.Annotations)
				}
				if _, rev := rawGet(t, s, kv.key); m.ResourceVersion != strconv.FormatInt(rev, 10) {
					t.Errorf("resourceVersion %s, want %d", m.ResourceVersion, rev)
				}

				if _, err := s.Update(ctx, obj); err != nil {
					t.Fatalf("Update: %v", err)
				}
				if got, _ := rawGet(t, s, kv.key); got != kv.value {
					t.Errorf("write-back changed the stored value\n got %s\nwant %s", got, kv.value)
				}
			})
		}
		// List shows the same user-facing names.
		gnps, _, err := s.List(ctx, "GlobalNetworkPolicy", "")
		if err != nil {
			t.Fatal(err)
		}
		if got := names(gnps); !slices.Equal(got, []string{"allow-dns"}) {
			t.Errorf("List(GlobalNetworkPolicy) = %v, want [allow-dns]", got)
		}
	})
}

func TestErrors(t *testing.T) {
	forEachBackend(t, func(t *testing.T, srv *etcdtest.Server) {
		s := openStore(t, srv)
		ctx := testCtx(t)
		pool, err := s.Create(ctx, decodeDoc(t, crudDocs[0].doc))
		if err != nil {
			t.Fatal(err)
		}
		npDoc := crudDocs[4].doc
		if _, err := s.Create(ctx, decodeDoc(t, npDoc)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Update(ctx, pool); err != nil { // pool is now stale
			t.Fatal(err)
		}
		missing := decodeDoc(t, crudDocs[0].doc)
		missing.Meta().Name = "pool2"

		tests := []struct {
			name    string
			call    func() error
			want    error
			message string
		}{
			{"create existing", func() error { _, err := s.Create(ctx, decodeDoc(t, npDoc)); return err },
				datastore.ErrAlreadyExists, "resource already exists: NetworkPolicy(default/allow-web)"},
			{"get missing", func() error { _, err := s.Get(ctx, "IPPool", "", "nope"); return err },
				datastore.ErrNotFound, "resource does not exist: IPPool(nope)"},
			{"update missing", func() error { _, err := s.Update(ctx, missing); return err },
				datastore.ErrNotFound, "resource does not exist: IPPool(pool2)"},
			{"update stale", func() error { _, err := s.Update(ctx, pool); return err },
				datastore.ErrConflict, "update conflict: IPPool(pool1)"},
			{"delete stale", func() error { _, err := s.Delete(ctx, "ippools", "", "pool1", pool.Meta().ResourceVersion); return err },
				datastore.ErrConflict, "update conflict: IPPool(pool1)"},
			{"delete missing", func() error { _, err := s.Delete(ctx, "gnp", "", "nope", ""); return err },
				datastore.ErrNotFound, "resource does not exist: GlobalNetworkPolicy(nope)"},
			{"delete missing with version", func() error { _, err := s.Delete(ctx, "gnp", "", "nope", "5"); return err },
				datastore.ErrNotFound, "resource does not exist: GlobalNetworkPolicy(nope)"},
			{"unknown kind", func() error { _, err := s.Get(ctx, "widgets", "", "w"); return err },
				datastore.ErrUnknownKind, "get widgets(w): unknown resource kind"},
			{"namespace missing", func() error { _, err := s.Get(ctx, "NetworkPolicy", "", "allow-web"); return err },
				nil, "get NetworkPolicy(allow-web): namespace must be set for a namespaced kind"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				err := tc.call()
				if err == nil {
					t.Fatal("no error")
				}
				if tc.want != nil && !errors.Is(err, tc.want) {
					t.Errorf("err = %v, want errors.Is %v", err, tc.want)
				}
				var se *datastore.Error
				if !errors.As(err, &se) {
					t.Errorf("err %T is not a *datastore.Error", err)
				}
				if err.Error() != tc.message {
					t.Errorf("message %q, want %q", err.Error(), tc.message)
				}
			})
		}

		t.Run("validation", func(t *testing.T) {
			bad := decodeDoc(t, `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"bad"},"spec":{"cidr":"not-a-cidr"}}`)
			_, err := s.Create(ctx, bad)
			var verr api.ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("err = %v (%T), want an api.ValidationError inside", err, err)
			}
			if _, err := s.Get(ctx, "IPPool", "", "bad"); !errors.Is(err, datastore.ErrNotFound) {
				t.Errorf("invalid pool was stored (Get err = %v)", err)
			}
		})
	})
}

// TestConcurrentReadModifyWrite has writers race to increment one counter
// with CAS updates; every successful update must count exactly once.
func TestConcurrentReadModifyWrite(t *testing.T) {
	forEachBackend(t, func(t *testing.T, srv *etcdtest.Server) {
		s := openStore(t, srv)
		ctx := testCtx(t)
		pool := decodeDoc(t, crudDocs[0].doc)
		pool.Meta().Annotations = map[string]string{"counter": "0"}
		if _, err := s.Create(ctx, pool); err != nil {
			t.Fatal(err)
		}
		const writers, increments = 8, 10
		var (
			wg        sync.WaitGroup
			mu        sync.Mutex
			successes int
			conflicts int
			failures  []error
		)
		for range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range increments {
					for {
						cur, err := s.Get(ctx, "IPPool", "", "pool1")
						if err != nil {
							mu.Lock()
							failures = append(failures, err)
							mu.Unlock()
							return
						}
						n, _ := strconv.Atoi(cur.Meta().Annotations["counter"])
						cur.Meta().Annotations["counter"] = strconv.Itoa(n + 1)
						_, err = s.Update(ctx, cur)
						mu.Lock()
						switch {
						case err == nil:
							successes++
						case errors.Is(err, datastore.ErrConflict):
							conflicts++
						default:
							failures = append(failures, err)
						}
						mu.Unlock()
						if err == nil {
							break
						}
						if !errors.Is(err, datastore.ErrConflict) {
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		if len(failures) > 0 {
			t.Fatalf("unexpected errors: %v", failures)
		}
		final, err := s.Get(ctx, "IPPool", "", "pool1")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := strconv.Atoi(final.Meta().Annotations["counter"])
		if got != successes || successes != writers*increments {
			t.Errorf("counter = %d, successful updates = %d, want both %d (lost update)", got, successes, writers*increments)
		}
		t.Logf("%d updates, %d conflicts retried", successes, conflicts)
	})
}

func TestTLS(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			srv := b.start(t, etcdtest.WithTLS())
			s := openStore(t, srv)
			ctx := testCtx(t)
			if _, err := s.Create(ctx, decodeDoc(t, crudDocs[0].doc)); err != nil {
				t.Fatalf("Create over TLS: %v", err)
			}
			if _, err := s.Get(ctx, "IPPool", "", "pool1"); err != nil {
				t.Fatalf("Get over TLS: %v", err)
			}

			t.Run("client without CA", func(t *testing.T) {
				cfg := configFor(srv)
				cfg.CACertFile = ""
				cfg.DialTimeout = 500 * time.Millisecond
				start := time.Now()
				_, err := New(ctx, cfg)
				if err == nil {
					t.Fatal("New without the CA succeeded")
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("New took %s to fail", d)
				}
				texttest.Contains(t, "error", err.Error(), srv.Endpoints[0], "certificate")
			})
		})
	}
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	dead := deadEndpoint(t)
	tests := []struct {
		name      string
		cfg       datastore.Config
		want      []string
		configErr bool // a *datastore.ConfigError: retrying cannot help
	}{
		{"no endpoints", datastore.Config{}, []string{"no endpoints"}, true},
		{"missing CA file", datastore.Config{Endpoints: []string{dead}, CACertFile: filepath.Join(dir, "nope.pem")},
			[]string{filepath.Join(dir, "nope.pem")}, true},
		{"garbage CA file", datastore.Config{Endpoints: []string{dead}, CACertFile: garbage}, []string{garbage, "no PEM certificate"}, true},
		{"missing key file", datastore.Config{Endpoints: []string{dead}, CertFile: garbage, KeyFile: filepath.Join(dir, "key.pem")},
			[]string{filepath.Join(dir, "key.pem")}, true},
		{"cert without key", datastore.Config{Endpoints: []string{dead}, CertFile: garbage}, []string{"must be given together"}, true},
		{"dead endpoint", datastore.Config{Endpoints: []string{dead}, DialTimeout: 300 * time.Millisecond},
			[]string{dead, "no endpoint answered within 300ms", "connection refused"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			s, err := New(testCtx(t), tc.cfg)
			if err == nil {
				s.Close()
				t.Fatal("New succeeded")
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("New took %s to fail", d)
			}
			texttest.Contains(t, "error", err.Error(), tc.want...)
			var cfgErr *datastore.ConfigError
			if got := errors.As(err, &cfgErr); got != tc.configErr {
				t.Errorf("errors.As(*datastore.ConfigError) = %v, want %v", got, tc.configErr)
			}
			// Check finds the same configuration errors without
			// connecting, and passes a configuration that is only
			// unreachable.
			checkErr := Check(tc.cfg)
			if (checkErr != nil) != tc.configErr || (checkErr != nil && checkErr.Error() != err.Error()) {
				t.Errorf("Check() = %v, want New's error %v: %v", checkErr, tc.configErr, err)
			}
		})
	}
}

// deadEndpoint is a loopback URL nothing listens on.
func deadEndpoint(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func TestFirstEndpointDead(t *testing.T) {
	forEachBackend(t, func(t *testing.T, srv *etcdtest.Server) {
		cfg := configFor(srv)
		cfg.Endpoints = append([]string{deadEndpoint(t)}, srv.Endpoints...)
		s, err := New(testCtx(t), cfg)
		if err != nil {
			t.Fatalf("New with the first endpoint dead: %v", err)
		}
		defer s.Close()
		ctx := testCtx(t)
		for i := range 5 {
			pool := decodeDoc(t, crudDocs[0].doc)
			pool.Meta().Name = fmt.Sprintf("pool%d", i)
			if _, err := s.Create(ctx, pool); err != nil {
				t.Fatalf("Create %d: %v", i, err)
			}
		}
	})
}

// TestEtcdGoesAway checks that a call without a deadline fails with an error
// naming the endpoints instead of hanging, and that the store works again
// once etcd is back.
func TestEtcdGoesAway(t *testing.T) {
	forEachBackend(t, func(t *testing.T, srv *etcdtest.Server) {
		cfg := configFor(srv)
		cfg.RequestTimeout = 500 * time.Millisecond
		s, err := New(testCtx(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		srv.Stop()
		start := time.Now()
		_, err = s.Get(t.Context(), "IPPool", "", "pool1")
		if err == nil {
			t.Fatal("Get with etcd stopped succeeded")
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("Get took %s to fail", d)
		}
		if !strings.Contains(err.Error(), srv.Endpoints[0]) {
			t.Errorf("error %q does not name the endpoint", err)
		}
		srv.Restart(t)
		ctx := testCtx(t)
		deadline := time.Now().Add(15 * time.Second)
		for {
			_, err := s.Create(ctx, decodeDoc(t, crudDocs[0].doc))
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("store did not recover after etcd restart: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// TestDefaultAllowProfile: as Calico's etcd backend, the store shows
// projectcalico-default-allow without storing it (Get, List, a watch's
// Reset) and refuses to write or delete it.
func TestDefaultAllowProfile(t *testing.T) {
	srv := etcdtest.Start(t)
	s := openStore(t, srv)
	ctx := testCtx(t)
	got, err := s.Get(ctx, "Profile", "", datastore.DefaultAllowProfileName)
	if err != nil {
		t.Fatal(err)
	}
	p := got.(*api.Profile)
	if p.ResourceVersion != "1" || len(p.Spec.Ingress) != 1 || p.Spec.Ingress[0].Action != api.Allow || len(p.Spec.Egress) != 1 || p.Spec.Egress[0].Action != api.Allow {
		t.Errorf("default-allow profile: %s", toJSON(t, p))
	}
	mine, err := s.Create(ctx, decodeDoc(t, `{"kind":"Profile","apiVersion":"projectcalico.org/v3","metadata":{"name":"zz-mine"}}`))
	if err != nil {
		t.Fatal(err)
	}
	list, rev, err := s.List(ctx, "Profile", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := names(list); !slices.Equal(got, []string{datastore.DefaultAllowProfileName, "zz-mine"}) {
		t.Errorf("List = %v", got)
	}
	// A watch from a compacted revision starts with a Reset.
	if _, err := s.Create(ctx, decodeDoc(t, `{"kind":"Profile","apiVersion":"projectcalico.org/v3","metadata":{"name":"zz-later"}}`)); err != nil {
		t.Fatal(err)
	}
	_, rev, err = s.List(ctx, "Profile", "")
	if err != nil {
		t.Fatal(err)
	}
	srv.Compact(t, rev)
	for _, kind := range []string{"Profile", ""} {
		wctx, cancel := context.WithCancel(ctx)
		ev := nextEvent(t, s.Watch(wctx, kind, rv(t, mine)))
		if ev.Type != datastore.Reset || !slices.Contains(names(ev.Objects), datastore.DefaultAllowProfileName) {
			t.Errorf("Watch(%q) first event %v %v, want a Reset with the default-allow profile", kind, ev.Type, names(ev.Objects))
		}
		cancel()
	}
	if resp, err := s.Etcd().Get(ctx, Prefix+"profiles/"+datastore.DefaultAllowProfileName); err != nil || len(resp.Kvs) != 0 {
		t.Errorf("the default-allow profile was stored: %v %v", resp, err)
	}
	for op, err := range map[string]error{
		"create": func() error { _, err := s.Create(ctx, datastore.DefaultAllowProfile()); return err }(),
		"update": func() error { _, err := s.Update(ctx, datastore.DefaultAllowProfile()); return err }(),
		"apply":  func() error { _, err := s.Apply(ctx, datastore.DefaultAllowProfile()); return err }(),
		"delete": func() error {
			_, err := s.Delete(ctx, "Profile", "", datastore.DefaultAllowProfileName, "")
			return err
		}(),
	} {
		want := datastore.ErrNotSupported
		if op == "create" {
			want = datastore.ErrAlreadyExists
		}
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", op, err, want)
		}
	}
}
