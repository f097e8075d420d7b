package ctl

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/projectcalico/calico-node/bgp"
)

// statusSocketFlag names the agent's BGP status socket. It is defined on
// `node` (so that NormalizeArgs, which moves a verb's flags in front of its
// sub-verb, finds it there) and on the top-level `calico-node status`.
func statusSocketFlag() cli.Flag {
	return &cli.StringFlag{
		Name: "bgp-status-socket", EnvVars: []string{"CALICO_BGP_STATUS_SOCKET"}, Value: bgp.DefaultStatusSocket,
		Usage: "the agent's BGP status socket",
	}
}

// nodeCommand is `calicoctl node`.
func nodeCommand() *cli.Command {
	return &cli.Command{
		Name:            "node",
		Usage:           "node-level operations: status, routes, bgp why",
		Flags:           []cli.Flag{statusSocketFlag(), nodeOutputFlag()},
		HideHelpCommand: true,
		Subcommands: []*cli.Command{{
			Name:   "status",
			Usage:  "show the BGP sessions of the agent on this host",
			Action: nodeStatus,
		}, nodeRoutesCommand(), nodeBGPCommand()},
	}
}

// StatusCommand is `calico-node status`: the same report as `calicoctl
// node status`.
func StatusCommand() *cli.Command {
	return &cli.Command{
		Name:   "status",
		Usage:  "show the BGP sessions of the agent on this host (as calicoctl node status)",
		Flags:  []cli.Flag{statusSocketFlag()},
		Action: nodeStatus,
	}
}

// nodeStatus asks the running agent over its socket; it needs no datastore.
func nodeStatus(c *cli.Context) error {
	ctx, cancel := context.WithTimeout(c.Context, 5*time.Second)
	defer cancel()
	st, err := bgp.QueryStatus(ctx, c.String("bgp-status-socket"))
	if err != nil {
		if errors.Is(err, bgp.ErrNotRunning) {
			// calicoctl's exact words, on stdout, and a failing exit status.
			fmt.Fprintln(c.App.Writer, bgp.ErrNotRunning.Error())
			return cli.Exit("", 1)
		}
		return err
	}
	return bgp.WriteStatus(c.App.Writer, st, time.Now())
}
