package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/projectcalico/calico-node/internal/buildinfo"
	"github.com/projectcalico/calico-node/internal/cni/cnientry"
	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/connect"
	"github.com/projectcalico/calico-node/internal/ipam"
)

// Plugin names as installed in the CNI bin dir.
const (
	NetworkPlugin = cnientry.NetworkPlugin
	IPAMPlugin    = cnientry.IPAMPlugin
)

// Time limits. A runtime waits minutes for a plugin; these make an
// unreachable etcd or API server an error (code 11, try again later) long
// before that.
const (
	etcdDialTimeout = 5 * time.Second
	// etcdRequestTimeout bounds one datastore round trip.
	etcdRequestTimeout = 5 * time.Second
	// kddRequestTimeout bounds one Kubernetes API round trip.
	kddRequestTimeout = 15 * time.Second
	// ipamTimeout bounds one IPAM operation (a few round trips, and
	// retries when other nodes race for the same block).
	ipamTimeout    = 20 * time.Second
	commandTimeout = 60 * time.Second
	// undoTimeout bounds each cleanup step after a failed ADD: the failure
	// may well be the datastore being down.
	undoTimeout = 3 * time.Second
)

// requestTimeout bounds one round trip to store: an API server under
// load queues requests for longer than etcd takes to answer.
func requestTimeout(store datastore.Store) time.Duration {
	if store.Type() == datastore.TypeKubernetes {
		return kddRequestTimeout
	}
	return etcdRequestTimeout
}

// SupportedVersions are the CNI spec versions both plugins speak.
var SupportedVersions = version.PluginSupports("0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")

// Main runs one plugin invocation as the runtime drives it and returns the
// error already reported on stdout (the caller only sets the exit code).
func Main(plugin string) error {
	// One short command per process: collecting garbage would only add
	// latency. The limit brings the collector back should a command ever
	// allocate far more than the few megabytes it needs.
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(256 << 20)

	var funcs skel.CNIFuncs
	switch plugin {
	case IPAMPlugin:
		funcs = skel.CNIFuncs{Add: ipamAdd, Del: ipamDel, Check: ipamCheck, GC: gcFunc(plugin), Status: statusFunc(plugin)}
	default:
		funcs = skel.CNIFuncs{Add: cmdAdd, Del: cmdDel, Check: cmdCheck, GC: gcFunc(plugin), Status: statusFunc(plugin)}
	}
	if os.Getenv("CNI_COMMAND") == "VERSION" {
		return printErr(answerVersion(os.Stdin, os.Stdout))
	}
	about := fmt.Sprintf("%s CNI plugin, %s", plugin, buildinfo.String())
	if err := skel.PluginMainFuncsWithError(funcs, SupportedVersions, about); err != nil {
		return printErr(err)
	}
	return nil
}

// printErr reports err as the CNI error JSON on stdout, which is all a
// runtime reads.
func printErr(err error) error {
	if err == nil {
		return nil
	}
	var e *types.Error
	if !errors.As(err, &e) {
		e = types.NewError(types.ErrInternal, err.Error(), "")
	}
	if perr := e.Print(); perr != nil {
		return perr
	}
	return e
}

// answerVersion answers VERSION as the spec words it: the response carries the
// cniVersion of the request (skel would answer with the newest version
// instead), plus every version we support. A request without cniVersion is
// a 0.1.0 request.
func answerVersion(stdin io.Reader, stdout io.Writer) error {
	data, err := io.ReadAll(stdin)
	if err != nil {
		return types.NewError(types.ErrIOFailure, "read stdin: "+err.Error(), "")
	}
	var req struct {
		CNIVersion string `json:"cniVersion"`
	}
	if len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, &req); err != nil {
			return types.NewError(types.ErrDecodingFailure, "decode VERSION request: "+err.Error(), "")
		}
	}
	if req.CNIVersion == "" {
		req.CNIVersion = "0.1.0"
	}
	if !slices.Contains(SupportedVersions.SupportedVersions(), req.CNIVersion) {
		return types.NewError(types.ErrIncompatibleCNIVersion, "incompatible CNI versions",
			fmt.Sprintf("config is %q, plugin supports %q", req.CNIVersion, SupportedVersions.SupportedVersions()))
	}
	return json.NewEncoder(stdout).Encode(struct {
		CNIVersion        string   `json:"cniVersion"`
		SupportedVersions []string `json:"supportedVersions"`
	}{req.CNIVersion, SupportedVersions.SupportedVersions()})
}

// host is where an invocation runs: a plugin process (the zero host: the
// process's environment, stdout and stderr, its own etcd connection) or
// the agent serving a forwarded request (Server).
type host struct {
	env    func(string) string // nil: os.Getenv
	stdout io.Writer           // nil: os.Stdout
	logTo  io.Writer           // nil: os.Stderr
	// stores hands out a shared, already connected store for a config;
	// nil: connect for this invocation and close after it.
	stores func(context.Context, datastore.Config) (datastore.Store, error)
	// netnsName is the runtime's name for the namespace when args.Netns
	// is a descriptor path (/proc/self/fd/N) of the agent's: results
	// report it, and the namespace is checked against it while it is
	// visible here.
	netnsName string
	// kube: see netConf.kube.
	kube func(*netConf) (*k8sAPI, error)
	// ipamCache, if set, is the agent's IPAM cache for a store that
	// stores handed out; nil in a plugin process.
	ipamCache func(datastore.Store) *ipam.Cache
	// dataplane is the agent's tracker when the agent serves the
	// command; nil in a plugin process (programmed.go).
	dataplane Dataplane
	// policyTimeout is the agent's default wait for the dataplane (0:
	// defaultPolicySetupTimeout, negative: none).
	policyTimeout time.Duration
	// noPodView makes ADD read the pod even where the agent's watch
	// holds it (view.go): the second run after errStalePod.
	noPodView bool
}

func (h *host) getenv(key string) string {
	if h.env != nil {
		return h.env(key)
	}
	return os.Getenv(key)
}

func (h *host) out() io.Writer {
	if h.stdout != nil {
		return h.stdout
	}
	return os.Stdout
}

// invocation is one command's parsed input and the connections it opened.
type invocation struct {
	host   *host
	plugin string
	args   *skel.CmdArgs
	conf   *netConf
	logger *slog.Logger
	node   string
	// k8s is set when CNI_ARGS name a Kubernetes pod.
	k8s *k8sArgs
	// requestedIP is CNI_ARGS "IP=" (calico-ipam only).
	requestedIP string

	store       datastore.Store
	sharedStore bool // the host's: not closed with the invocation

	// start and last time the command's phases (debug log).
	start, last time.Time
}

// phase logs how long the step that just ended took: the ADD path is
// latency-critical and this is how an operator sees where time goes.
func (inv *invocation) phase(name string) {
	now := time.Now()
	inv.logger.Debug("phase done", "phase", name, "took", now.Sub(inv.last), "total", now.Sub(inv.start))
	inv.last = now
}

type k8sArgs struct {
	namespace, pod string
	uid            string // K8S_POD_UID, when the runtime passes it
}

// newInvocation parses the config and CNI_ARGS; it opens nothing.
func newInvocation(h *host, plugin string, args *skel.CmdArgs) (*invocation, error) {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return nil, err
	}
	conf.env, conf.kube = h.env, h.kube
	now := time.Now()
	inv := &invocation{host: h, plugin: plugin, args: args, conf: conf, start: now, last: now}
	logTo := h.logTo
	if logTo == nil {
		logTo = os.Stderr
	}
	inv.logger = newLogger(conf, plugin, logTo).With("containerID", args.ContainerID)
	if args.IfName != "" {
		inv.logger = inv.logger.With("ifname", args.IfName)
	}
	cniArgs := parseCNIArgs(args.Args)
	if ns, pod := cniArgs["K8S_POD_NAMESPACE"], cniArgs["K8S_POD_NAME"]; ns != "" && pod != "" {
		inv.k8s = &k8sArgs{namespace: ns, pod: pod, uid: cniArgs["K8S_POD_UID"]}
		inv.logger = inv.logger.With("pod", ns+"/"+pod)
	}
	inv.requestedIP = cniArgs["IP"]
	if inv.node, err = conf.nodename(); err != nil {
		return nil, err
	}
	return inv, nil
}

// parseCNIArgs splits CNI_ARGS ("K=V;K=V"). Unknown keys are kept, never an
// error: runtimes pass arguments meant for other plugins.
func parseCNIArgs(s string) map[string]string {
	out := map[string]string{}
	for pair := range strings.SplitSeq(s, ";") {
		if k, v, ok := strings.Cut(pair, "="); ok {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}

// datastore connects to etcd on first use.
func (inv *invocation) datastore(ctx context.Context) (datastore.Store, error) {
	if inv.store != nil {
		return inv.store, nil
	}
	cfg, err := inv.conf.datastoreConfig(inv.logger)
	if err != nil {
		return nil, err
	}
	open, shared := connect.New, false
	if inv.host.stores != nil {
		open, shared = inv.host.stores, true
	}
	store, err := open(ctx, cfg)
	if err != nil {
		var cfgErr *datastore.ConfigError
		if errors.As(err, &cfgErr) {
			field := "etcd_ca_cert_file/etcd_cert_file/etcd_key_file"
			switch {
			case cfg.Type == datastore.TypeKubernetes:
				field = "kubernetes"
			case len(cfg.Endpoints) == 0:
				field = "etcd_endpoints"
			}
			return nil, configError(field, "%v", err)
		}
		return nil, types.NewError(types.ErrTryAgainLater, err.Error(), "")
	}
	inv.store, inv.sharedStore = store, shared
	return store, nil
}

func (inv *invocation) close() {
	if inv.store != nil && !inv.sharedStore {
		inv.store.Close()
	}
}

// sandbox is the pod namespace's path as the runtime named it.
func (inv *invocation) sandbox() string {
	if inv.host.netnsName != "" {
		return inv.host.netnsName
	}
	return inv.args.Netns
}

// getenv reads the invocation's environment.
func (inv *invocation) getenv(key string) string { return inv.host.getenv(key) }

// cniVersion is the version results are printed in; a config without one
// is a 0.1.0 config.
func (inv *invocation) cniVersion() string {
	if inv.conf.CNIVersion == "" {
		return "0.1.0"
	}
	return inv.conf.CNIVersion
}

// isUnavailable reports whether err means the datastore (etcd, the
// Kubernetes API server) could not be reached or did not answer in time.
func isUnavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, datastore.ErrUnavailable) {
		return true
	}
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted:
			return true
		}
	}
	return false
}

// run is the common shell of every command: parse, run with a deadline,
// close connections, log the outcome.
func run(h *host, plugin, command string, args *skel.CmdArgs, fn func(*invocation, context.Context) error) error {
	start := time.Now()
	inv, err := newInvocation(h, plugin, args)
	if err != nil {
		return err
	}
	defer inv.close()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	err = fn(inv, ctx)
	if err != nil {
		inv.logger.Error(command+" failed", "err", err, "took", time.Since(start))
		return err
	}
	inv.logger.Info(command+" done", "took", time.Since(start))
	return nil
}
