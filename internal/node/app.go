package node

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/projectcalico/calico-node/internal/buildinfo"
	"github.com/projectcalico/calico-node/internal/ctl"
)

// NewApp builds the `calico-node` command line.
func NewApp() *cli.App {
	return &cli.App{
		Name:            "calico-node",
		Usage:           "Calico networking, policy, BGP and CLI in one binary",
		HideHelpCommand: true,
		Commands: []*cli.Command{
			runCommand(),
			planCommand(),
			fanoutCommand(),
			cleanupCommand(),
			ctl.StatusCommand(),
			{
				Name:            "ctl",
				Usage:           "calicoctl: manage Calico resources (same as running this binary as `calicoctl`)",
				Flags:           ctl.GlobalFlags(),
				Subcommands:     ctl.Commands(),
				HideHelpCommand: true,
			},
			{
				Name:  "version",
				Usage: "print the version",
				Action: func(c *cli.Context) error {
					_, err := fmt.Fprintln(c.App.Writer, buildinfo.String())
					return err
				},
			},
		},
	}
}
