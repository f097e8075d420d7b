package kdd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/projectcalico/calico-node/internal/datastore"
)

// client is a JSON REST client for the Kubernetes API: plain HTTP with
// client-go's transport (TLS, credentials, token rotation) and nothing of
// its schemes, so that the CNI plugin, which links this package, pays no
// package init for them.
type client struct {
	base string // "https://10.0.0.1:6443", no trailing slash
	http *http.Client
	// watchHTTP has no overall timeout: a watch lives for minutes.
	watchHTTP *http.Client
}

// RESTConfig builds the client-go configuration Calico's components use:
// a kubeconfig (the field, else KUBECONFIG), overridden by the explicit
// fields, else the pod's in-cluster service account.
func RESTConfig(kc datastore.KubeConfig) (*rest.Config, error) {
	path := kc.Kubeconfig
	if path == "" {
		path = os.Getenv("KUBECONFIG")
	}
	var cfg *rest.Config
	switch {
	case path != "" || kc.APIEndpoint != "":
		if path != "" {
			if _, err := os.Stat(path); err != nil {
				return nil, &datastore.ConfigError{Err: fmt.Errorf("kubeconfig: %w", err)}
			}
		}
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
		overrides := &clientcmd.ConfigOverrides{}
		overrides.ClusterInfo.Server = kc.APIEndpoint
		overrides.ClusterInfo.CertificateAuthority = kc.CAFile
		overrides.ClusterInfo.InsecureSkipTLSVerify = kc.InsecureSkipTLSVerify
		overrides.AuthInfo.ClientCertificate = kc.CertFile
		overrides.AuthInfo.ClientKey = kc.KeyFile
		overrides.AuthInfo.Token = kc.Token
		c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
		if err != nil {
			return nil, &datastore.ConfigError{Err: fmt.Errorf("kubernetes API configuration: %w", err)}
		}
		cfg = c
	default:
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, &datastore.ConfigError{Err: fmt.Errorf("kubernetes API configuration: no kubeconfig given (KUBECONFIG, --kubeconfig) and not in a pod: %w", err)}
		}
		cfg = c
	}
	// calico-node's requests are few and its watches long; client-go's
	// default 5 QPS would throttle an IPAM burst.
	cfg.QPS, cfg.Burst = 1000, 1000
	if cfg.UserAgent == "" {
		cfg.UserAgent = "calico-node"
	}
	return cfg, nil
}

func newClient(cfg *rest.Config, timeout time.Duration) (*client, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, &datastore.ConfigError{Err: fmt.Errorf("kubernetes API client: %w", err)}
	}
	base, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, &datastore.ConfigError{Err: fmt.Errorf("kubernetes API server URL: %w", err)}
	}
	watch := *hc
	watch.Timeout = 0
	hc.Timeout = timeout
	return &client{base: strings.TrimSuffix(base.String(), "/"), http: hc, watchHTTP: &watch}, nil
}

// statusError is an API error: the server's Status, or the HTTP code.
type statusError struct {
	Code    int
	Reason  string // "NotFound", "AlreadyExists", "Conflict", "Forbidden", "Expired", ...
	Message string
	Method  string
	Path    string
	Server  string // the API server's base URL
}

func (e *statusError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Code)
	}
	if e.Is(datastore.ErrUnavailable) {
		// Said as the unreachable server is: an operator reading a CNI
		// error or a log line learns which server is in trouble.
		return fmt.Sprintf("kubernetes API server %s unavailable: %s %s: %s (%d %s)", e.Server, e.Method, e.Path, msg, e.Code, e.Reason)
	}
	return fmt.Sprintf("kubernetes API %s %s: %s (%d %s)", e.Method, e.Path, msg, e.Code, e.Reason)
}

// Is maps API errors to the datastore's sentinels.
func (e *statusError) Is(target error) bool {
	switch target {
	case datastore.ErrUnavailable:
		// Throttled, or an API server that cannot reach its etcd or is
		// still starting: the request had no effect and may succeed
		// later.
		switch e.Code {
		case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
			http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
		return false
	case datastore.ErrNotFound:
		return e.Code == http.StatusNotFound
	case datastore.ErrAlreadyExists:
		return e.Code == http.StatusConflict && e.Reason == "AlreadyExists"
	case datastore.ErrConflict:
		return e.Code == http.StatusConflict && e.Reason != "AlreadyExists"
	}
	return false
}

// unreachableError is a request that got no HTTP answer: connection
// refused, reset, a TLS failure, no answer in time. It names the API
// server, so that whoever reads it (an operator, a CNI error) knows what
// was down.
type unreachableError struct {
	base string
	err  error
}

func (e *unreachableError) Error() string {
	return "kubernetes API server " + e.base + " unreachable: " + e.err.Error()
}

func (e *unreachableError) Unwrap() error { return e.err }

func (e *unreachableError) Is(target error) bool { return target == datastore.ErrUnavailable }

// transportError wraps what http.Client.Do returned; the caller's own
// cancellation stays what it is.
func (c *client) transportError(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("kubernetes API server %s: %w", c.base, err)
	}
	return &unreachableError{base: c.base, err: err}
}

// gone reports a watch or list from a resourceVersion the server no
// longer has (HTTP 410, or a watch's Status event with code 410).
func gone(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.Code == http.StatusGone
}

func forbidden(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.Code == http.StatusForbidden
}

// apiStatus is the subset of metav1.Status the client reads.
type apiStatus struct {
	Kind    string `json:"kind"`
	Code    int    `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// maxThrottleRetries bounds the retries of a request the API server
// refused with 429 Too Many Requests: its priority-and-fairness limits,
// or a custom resource whose storage is still initialising right after
// the CRD was established. The refused request had no effect, so
// retrying is safe whatever the verb.
const maxThrottleRetries = 10

// do sends one request. body, when not nil, is JSON-encoded (a []byte is
// sent as is); out, when not nil, receives the JSON response. A 429 is
// retried after the server's Retry-After (at most 1s each time).
func (c *client) do(ctx context.Context, method, path string, query url.Values, contentType string, body, out any) error {
	for attempt := 0; ; attempt++ {
		retryAfter, err := c.doOnce(ctx, method, path, query, contentType, body, out)
		if retryAfter == 0 || attempt >= maxThrottleRetries {
			return err
		}
		t := time.NewTimer(retryAfter)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// doOnce is one attempt of do; retryAfter is how long to wait before the
// next when the server asked for one (429), else 0.
func (c *client) doOnce(ctx context.Context, method, path string, query url.Values, contentType string, body, out any) (retryAfter time.Duration, err error) {
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		data, ok := body.([]byte)
		if !ok {
			var err error
			if data, err = json.Marshal(body); err != nil {
				return 0, fmt.Errorf("encode %s %s: %w", method, path, err)
			}
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		if contentType == "" {
			contentType = "application/json"
		}
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, c.transportError(ctx, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return 0, fmt.Errorf("kubernetes API %s %s: read response: %w", method, path, err)
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		wait := time.Second
		if n, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && n >= 0 && n < 1 {
			wait = 100 * time.Millisecond
		}
		return wait, c.statusOf(method, path, resp.StatusCode, data)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return 0, c.statusOf(method, path, resp.StatusCode, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return 0, fmt.Errorf("kubernetes API %s %s: decode response: %w", method, path, err)
		}
	}
	return 0, nil
}

func (c *client) statusOf(method, path string, code int, body []byte) error {
	se := &statusError{Code: code, Method: method, Path: path, Server: c.base}
	var st apiStatus
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" {
		se.Reason, se.Message = st.Reason, st.Message
	} else {
		se.Message = strings.TrimSpace(string(body))
	}
	return se
}

// watchEvent is one line of a watch stream.
type watchEvent struct {
	Type   string          `json:"type"` // ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
	Object json.RawMessage `json:"object"`
}

// watch opens a watch on path from resourceVersion rv and calls fn for
// each event until the stream ends, ctx is done, or fn returns an error.
// opened, when not nil, is called once the server has accepted the watch,
// before the first event. A Status event with code 410 comes back as a
// gone error.
func (c *client) watch(ctx context.Context, path, rv string, opened func(), fn func(watchEvent) error) error {
	q := url.Values{"watch": {"1"}, "allowWatchBookmarks": {"true"}}
	if rv != "" {
		q.Set("resourceVersion", rv)
	}
	// The server ends a watch after a random 5-10 minutes unless asked
	// otherwise; the caller resumes from the last revision it saw.
	q.Set("timeoutSeconds", "480")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.watchHTTP.Do(req)
	if err != nil {
		return c.transportError(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return c.statusOf("WATCH", path, resp.StatusCode, data)
	}
	if opened != nil {
		opened()
	}
	dec := json.NewDecoder(bufio.NewReaderSize(resp.Body, 64<<10))
	for {
		var ev watchEvent
		if err := dec.Decode(&ev); err != nil {
			// A server going away (GOAWAY: shutting down, or shedding
			// connections) ends the stream as cleanly as EOF: the caller
			// resumes, and learns from that whether the server is still
			// there.
			var goAway http2.GoAwayError
			if errors.Is(err, io.EOF) || errors.As(err, &goAway) || ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("kubernetes API WATCH %s: %w", path, err)
		}
		if ev.Type == "ERROR" {
			var st apiStatus
			_ = json.Unmarshal(ev.Object, &st)
			return &statusError{Code: st.Code, Reason: st.Reason, Message: st.Message, Method: "WATCH", Path: path, Server: c.base}
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
}

// ServerURL is the base URL of the API server kc names, as a Store on it
// reports it (Store.Server): the CNI plugin's config and the agent's
// name one API server in different words (a kubeconfig file, the
// in-cluster service account), and this is what tells that they agree.
func ServerURL(kc datastore.KubeConfig) (string, error) {
	cfg, err := RESTConfig(kc)
	if err != nil {
		return "", err
	}
	base, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return "", &datastore.ConfigError{Err: fmt.Errorf("kubernetes API server URL: %w", err)}
	}
	return strings.TrimSuffix(base.String(), "/"), nil
}
