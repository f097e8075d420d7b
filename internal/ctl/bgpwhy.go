package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/projectcalico/calico-node/bgp"
)

// `calicoctl node routes` and `calicoctl node bgp why PREFIX`: the BGP
// speaker's paths and one prefix's fate, asked of the agent over the same
// socket as `node status`. The agent derives both from its speaker's
// RIBs, its policy and its route table; this side only prints.

// nodeOutputFlag is defined on `node` (as the socket flag is, so that
// NormalizeArgs finds it after a sub-verb's arguments).
func nodeOutputFlag() cli.Flag {
	return &cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "text",
		Usage: "routes and bgp why: text or json"}
}

func nodeRoutesCommand() *cli.Command {
	return &cli.Command{
		Name:  "routes",
		Usage: "show the BGP speaker's routes: prefix, next hop, peer, age, best or not, in the kernel or not",
		Action: func(c *cli.Context) error {
			return askAgent(c, func(ctx context.Context, sock string) error {
				rep, err := bgp.QueryRoutes(ctx, sock)
				if err != nil {
					return err
				}
				if c.String("output") == "json" {
					return writeJSON(c, rep)
				}
				return bgp.WriteRoutes(c.App.Writer, rep, time.Now())
			})
		},
	}
}

func nodeBGPCommand() *cli.Command {
	return &cli.Command{
		Name:            "bgp",
		Usage:           "explain the BGP speaker's decisions",
		HideHelpCommand: true,
		Subcommands: []*cli.Command{{
			Name:      "why",
			Usage:     "why a prefix is (not) exported to each peer, and why this node has (or lacks) its kernel route",
			ArgsUsage: "PREFIX",
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return cli.Exit("usage: calicoctl node bgp why PREFIX (e.g. 10.244.1.0/26, or an address)", 1)
				}
				return askAgent(c, func(ctx context.Context, sock string) error {
					rep, err := bgp.QueryWhy(ctx, sock, c.Args().First())
					if err != nil {
						return err
					}
					if c.String("output") == "json" {
						return writeJSON(c, rep)
					}
					return bgp.WriteWhy(c.App.Writer, rep)
				})
			},
		}},
	}
}

// askAgent runs q against the agent's socket with node status's handling
// of an agent that is not there.
func askAgent(c *cli.Context, q func(ctx context.Context, sock string) error) error {
	switch o := c.String("output"); o {
	case "text", "json":
	default:
		return cli.Exit(fmt.Sprintf("unknown output format %q: text or json", o), 1)
	}
	ctx, cancel := context.WithTimeout(c.Context, 15*time.Second)
	defer cancel()
	err := q(ctx, c.String("bgp-status-socket"))
	switch {
	case errors.Is(err, bgp.ErrNotRunning):
		fmt.Fprintln(c.App.Writer, bgp.ErrNotRunning.Error())
		return cli.Exit("", 1)
	case errors.Is(err, bgp.ErrAgent):
		return cli.Exit(err.Error(), 1)
	}
	return err
}

func writeJSON(c *cli.Context, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(c.App.Writer, string(b))
	return err
}
