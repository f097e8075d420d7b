package ctl

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/projectcalico/calico-node/internal/buildinfo"
	"github.com/projectcalico/calico-node/internal/datastore/connect"
	"github.com/projectcalico/calico-node/internal/model/api"
)

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the client version and the cluster's (from ClusterInformation)",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "client", Usage: "print the client version only"},
			&cli.DurationFlag{Name: "poll", Usage: "keep printing the cluster's version and type when they change, checking this often (0: once)"},
		},
		Action: cmdVersion,
	}
}

// cmdVersion prints what calicoctl version prints: the client's version
// and commit, then the cluster's calicoVersion and clusterType from
// ClusterInformation "default" ("unknown" when empty). A datastore that
// cannot be reached is reported as calicoctl reports it, without failing.
func cmdVersion(c *cli.Context) error {
	w := c.App.Writer
	fmt.Fprintln(w, "Client Version:   ", buildinfo.Version)
	fmt.Fprintln(w, "Git commit:       ", buildinfo.Revision())
	if c.Bool("client") {
		return nil
	}
	cfg, err := configFromContext(c, os.Getenv)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Context, 30*time.Second)
	store, err := connect.New(ctx, cfg.Config)
	cancel()
	if err != nil {
		fmt.Fprintln(w, "Unable to detect installed Calico version")
		return nil
	}
	defer store.Close()
	poll := c.Duration("poll")
	var shownVersion, shownType string
	for {
		ctx, cancel := context.WithTimeout(c.Context, 30*time.Second)
		obj, err := store.Get(ctx, "ClusterInformation", "", "default")
		cancel()
		if err == nil {
			ci := obj.(*api.ClusterInformation)
			v, t := ci.Spec.CalicoVersion, ci.Spec.ClusterType
			if v == "" {
				v = "unknown"
			}
			if t == "" {
				t = "unknown"
			}
			if v != shownVersion {
				fmt.Fprintln(w, "Cluster Version:  ", v)
				shownVersion = v
			}
			if t != shownType {
				fmt.Fprintln(w, "Cluster Type:     ", t)
				shownType = t
			}
		} else {
			err = fmt.Errorf("unable to retrieve Cluster Version or Type: %w", err)
			shownVersion, shownType = "", ""
		}
		if poll <= 0 {
			return err
		}
		if err != nil {
			fmt.Fprintln(c.App.ErrWriter, err)
		}
		select {
		case <-c.Context.Done():
			return nil
		case <-time.After(poll):
		}
	}
}
