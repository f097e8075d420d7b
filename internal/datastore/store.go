package datastore

import (
	"context"
	"log/slog"
	"time"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// Datastore types, as Calico names them (DATASTORE_TYPE, the CNI config's
// datastore_type, calicoctl.cfg's datastoreType).
const (
	TypeEtcd       = "etcdv3"
	TypeKubernetes = "kubernetes"
)

// Store holds Calico's resources. See the package doc.
type Store interface {
	// Create stores a new resource; ErrAlreadyExists if it exists. A
	// ResourceVersion on obj is ignored.
	Create(ctx context.Context, obj api.Object) (api.Object, error)
	// Update replaces an existing resource (ErrNotFound otherwise). With
	// obj's ResourceVersion set it succeeds only at that version
	// (ErrConflict otherwise); without it the stored one is overwritten.
	Update(ctx context.Context, obj api.Object) (api.Object, error)
	// Apply creates the resource or updates it as Update does.
	Apply(ctx context.Context, obj api.Object) (api.Object, error)
	// Get returns one resource. The namespace is ignored for global kinds.
	Get(ctx context.Context, kind, namespace, name string) (api.Object, error)
	// List returns every resource of kind in namespace ("" = all), sorted
	// by namespace and name, and the revision it was read at.
	List(ctx context.Context, kind, namespace string) ([]api.Object, int64, error)
	// ListPrefix is List restricted to names starting with prefix; a
	// backend answers it without reading the whole namespace where it can
	// (the CNI plugin finds a pod's endpoints with it).
	ListPrefix(ctx context.Context, kind, namespace, prefix string) ([]api.Object, error)
	// Delete removes a resource and returns it as it was. With
	// resourceVersion set it succeeds only at that version.
	Delete(ctx context.Context, kind, namespace, name, resourceVersion string) (api.Object, error)
	// Watch streams changes to kind ("" = every kind) from fromRevision
	// on, inclusive (0: from now). The channel closes when ctx is done or
	// the Store is closed.
	Watch(ctx context.Context, kind string, fromRevision int64) <-chan Event
	// IPAM returns the store IPAM runs on.
	IPAM() KV
	// Type is TypeEtcd or TypeKubernetes.
	Type() string
	// Close ends all watches and releases the connection.
	Close() error
}

// Config says which datastore to use and how to reach it.
type Config struct {
	// Type is TypeEtcd (the default when empty) or TypeKubernetes.
	Type string

	// Endpoints are etcd client URLs ("https://10.0.0.1:2379") or host:port.
	Endpoints []string
	// CACertFile verifies the servers; CertFile and KeyFile are the client
	// certificate. Any of them turns TLS on.
	CACertFile, CertFile, KeyFile string
	// Username and Password enable etcd authentication.
	Username, Password string

	// Kube says how to reach the Kubernetes API for TypeKubernetes.
	Kube KubeConfig

	// DialTimeout bounds the connectivity probe at connect. Default 5s.
	DialTimeout time.Duration
	// RequestTimeout bounds each call whose context has no deadline of its
	// own. Default 10s. The Kubernetes datastore bounds a list's pages one
	// by one: a list of every pod of a large cluster may take longer.
	RequestTimeout time.Duration
	// Logger receives warnings about values a List has to skip. Default:
	// none.
	Logger *slog.Logger
	// NoProbe skips the Kubernetes datastore's check, at connect, that
	// Calico's CRDs are served: for a short-lived client (the CNI plugin)
	// whose first request would report a missing CRD anyway, one round
	// trip less per command.
	NoProbe bool
}

// KubeConfig locates the Kubernetes API server, as Calico's
// configuration does: a kubeconfig file, or explicit fields, or, with
// neither, the pod's in-cluster service account.
type KubeConfig struct {
	// Kubeconfig is a kubeconfig file (KUBECONFIG).
	Kubeconfig string
	// APIEndpoint overrides the server (K8S_API_ENDPOINT).
	APIEndpoint string
	// CAFile, CertFile, KeyFile and Token authenticate (K8S_CA_FILE,
	// K8S_CERT_FILE, K8S_KEY_FILE, K8S_API_TOKEN).
	CAFile, CertFile, KeyFile, Token string
	// InsecureSkipTLSVerify turns off server verification.
	InsecureSkipTLSVerify bool
}

// EffectiveType is cfg.Type with the default applied.
func (c Config) EffectiveType() string {
	if c.Type == "" {
		return TypeEtcd
	}
	return c.Type
}
