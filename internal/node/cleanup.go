package node

import (
	"fmt"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/projectcalico/calico-node/agent/epstatus"
	"github.com/projectcalico/calico-node/bgp"
	"github.com/projectcalico/calico-node/cniinstall"
	"github.com/projectcalico/calico-node/internal/cni"
	"github.com/projectcalico/calico-node/internal/cni/cnientry"
	"github.com/projectcalico/calico-node/internal/node/agentlock"
	"github.com/projectcalico/calico-node/internal/node/cleanup"
)

// cleanupCommand is `calico-node cleanup`. Its location flags have the
// names, environment variables and defaults of `calico-node run`'s, so
// that the environment an agent ran with points cleanup at its files.
func cleanupCommand() *cli.Command {
	env := func(names ...string) []string { return names }
	return &cli.Command{
		Name:  "cleanup",
		Usage: "remove what calico-node made on this node (iptables chains and hooks, ip sets, proto 80 routes, VXLAN devices, CNI files), once the agent is stopped",
		Description: "Removes exactly what calico-node creates and nothing else, and prints each object it removed. " +
			"Refuses while `calico-node run` runs on this node unless --force. " +
			"Pods' host veths stay unless --workloads; the embedded etcd's data and the nodename file stay unless --remove-data.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "dry-run", Usage: "print what would be removed; change nothing"},
			&cli.BoolFlag{Name: "force", Usage: "clean up even while an agent runs on this node (it puts back what it owns)"},
			&cli.BoolFlag{Name: "workloads", Usage: "also remove the pods' host veths (cali*): their pods lose their network interface"},
			&cli.BoolFlag{Name: "remove-data", Usage: "also remove the embedded etcd's data (<data-dir>/etcd: every resource of a single-node datastore) and <data-dir>/nodename"},
			&cli.StringFlag{Name: "data-dir", EnvVars: env("CALICO_DATA_DIR"), Value: "/var/lib/calico", Usage: "the agent's state directory (its lock, embedded etcd data, nodename file)"},
			&cli.StringFlag{Name: "cni-conf-dir", EnvVars: env("CALICO_CNI_CONF_DIR"), Value: cniinstall.DefaultConfDir, Usage: "CNI config directory install-cni wrote to"},
			&cli.StringFlag{Name: "cni-bin-dir", EnvVars: env("CALICO_CNI_BIN_DIR"), Value: cniinstall.DefaultBinDir, Usage: "CNI plugin directory install-cni wrote to"},
			&cli.StringFlag{Name: "cni-conf-name", EnvVars: env("CNI_CONF_NAME"), Value: cniinstall.DefaultConfName},
			&cli.StringFlag{Name: "cni-socket", EnvVars: env("CALICO_CNI_SOCKET"), Value: cnientry.DefaultSocket, Usage: "the agent's CNI socket (none: leave out)"},
			&cli.StringFlag{Name: "bgp-status-socket", EnvVars: env("CALICO_BGP_STATUS_SOCKET"), Value: bgp.DefaultStatusSocket, Usage: "the agent's BGP status socket (none: leave out)"},
			&cli.StringFlag{Name: "status-socket", EnvVars: env("CALICO_STATUS_SOCKET"), Value: epstatus.DefaultSocket, Usage: "the agent's status socket (none: leave out)"},
			&cli.StringFlag{Name: "endpoint-status-path-prefix", EnvVars: env("FELIX_ENDPOINTSTATUSPATHPREFIX"), Value: epstatus.DefaultPathPrefix, Usage: "where the agent keeps endpoint-status/ (felix's endpointStatusPathPrefix; none: leave out)"},
			&cli.StringFlag{Name: "ipam-lock-file", Value: cni.DefaultIPAMLockFile, Usage: "the CNI plugin's IPAM lock (the CNI config's ipam_lock_file; none: leave out)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("cleanup takes no arguments, got %q", c.Args().Slice())
			}
			none := func(flag string) string {
				if v := c.String(flag); v != "none" {
					return v
				}
				return ""
			}
			cfg := cleanup.Config{
				DataDir:      c.String("data-dir"),
				CNIConfDir:   c.String("cni-conf-dir"),
				CNIBinDir:    c.String("cni-bin-dir"),
				CNIConfName:  c.String("cni-conf-name"),
				CNISocket:    none("cni-socket"),
				BGPSocket:    none("bgp-status-socket"),
				IPAMLockFile: none("ipam-lock-file"),
				StatusSocket: none("status-socket"),
				StatusDir:    statusDir(none("endpoint-status-path-prefix")),
				Options:      cleanup.Options{Workloads: c.Bool("workloads"), RemoveData: c.Bool("remove-data")},
				Force:        c.Bool("force"),
				DryRun:       c.Bool("dry-run"),
			}
			return cleanup.Run(c.Context, cfg, c.App.Writer)
		},
	}
}

// statusDir is the endpoint status directory under prefix ("" none).
func statusDir(prefix string) string {
	if prefix == "" {
		return ""
	}
	return filepath.Join(prefix, epstatus.DirName)
}

// holdAgentLock marks this node as having a running agent for the life of
// the process, so that `calico-node cleanup` refuses to undo its work
// meanwhile (package agentlock). The returned func lets go.
func holdAgentLock(dataDir string) (release func(), err error) {
	l, err := agentlock.Shared(agentlock.Path(dataDir))
	if err != nil {
		return nil, err
	}
	return func() { l.Release() }, nil
}
