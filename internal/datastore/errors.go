package datastore

import (
	"errors"
	"strings"
)

// Sentinel errors, matched with errors.Is. Their text is calicoctl's.
var (
	ErrNotFound      = errors.New("resource does not exist")
	ErrAlreadyExists = errors.New("resource already exists")
	ErrConflict      = errors.New("update conflict")
	ErrUnknownKind   = errors.New("unknown resource kind")
	// ErrNotSupported is a write the backend cannot do, as Calico refuses
	// it too (on the Kubernetes datastore: creating or deleting a Node,
	// writing a Profile computed from a Namespace).
	ErrNotSupported = errors.New("operation not supported")
	// ErrUnavailable is a datastore that could not be reached or could
	// not serve the request now (connection refused, no answer in time,
	// an API server overloaded or starting): the same request may
	// succeed later. Backends wrap their transport errors so that
	// errors.Is finds it; the error text names the server.
	ErrUnavailable = errors.New("datastore unavailable")
)

// Error is the error every Store method returns: the operation, the
// resource it concerned, and the cause.
type Error struct {
	Op        string // "create", "update", "apply", "get", "list", "delete", "watch"
	Kind      string // the kind's canonical name, or the name the caller gave if unknown
	Namespace string
	Name      string
	Err       error
}

// Error reads like calicoctl for the sentinel causes
// ("resource does not exist: IPPool(pool1)") and as
// "<op> <resource>: <cause>" otherwise.
func (e *Error) Error() string {
	id := e.resource()
	switch e.Err {
	case ErrNotFound, ErrAlreadyExists, ErrConflict:
		return e.Err.Error() + ": " + id
	}
	return e.Op + " " + id + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

func (e *Error) resource() string {
	var b strings.Builder
	b.WriteString(e.Kind)
	switch {
	case e.Name != "" && e.Namespace != "":
		b.WriteString("(" + e.Namespace + "/" + e.Name + ")")
	case e.Name != "":
		b.WriteString("(" + e.Name + ")")
	case e.Namespace != "":
		b.WriteString(" in namespace " + e.Namespace)
	}
	return b.String()
}

// ConfigError is what New returns when the configuration itself is wrong (no
// endpoints, unreadable or malformed TLS files): unlike an unreachable
// cluster, retrying will not help.
type ConfigError struct {
	Err error
}

func (e *ConfigError) Error() string { return e.Err.Error() }

func (e *ConfigError) Unwrap() error { return e.Err }
