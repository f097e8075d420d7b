package ctl

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/datastore/connect"
)

// NewApp is calicoctl as a standalone app (the binary run as `calicoctl`).
func NewApp() *cli.App {
	return &cli.App{
		Name:            "calicoctl",
		Usage:           "manage Calico resources",
		Flags:           GlobalFlags(),
		Commands:        Commands(),
		HideHelpCommand: true,
	}
}

// GlobalFlags are the connection flags shared by every verb.
func GlobalFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "client config file", Value: DefaultConfigFile},
		&cli.StringFlag{Name: "datastore-type", Usage: "etcdv3 or kubernetes (overrides DATASTORE_TYPE and the config file)"},
		&cli.StringFlag{Name: "kubeconfig", Usage: "kubeconfig for the kubernetes datastore (overrides KUBECONFIG and the config file)"},
		&cli.StringFlag{Name: "etcd-endpoints", Usage: "comma-separated etcd endpoints (overrides ETCD_ENDPOINTS and the config file)"},
		&cli.StringFlag{Name: "etcd-key-file", Usage: "client key file for etcd TLS"},
		&cli.StringFlag{Name: "etcd-cert-file", Usage: "client certificate file for etcd TLS"},
		&cli.StringFlag{Name: "etcd-ca-cert-file", Usage: "CA certificate file for etcd TLS"},
		&cli.BoolFlag{Name: "allow-version-mismatch", Usage: "accepted for compatibility; client and agent are one binary"},
	}
}

// Commands are the calicoctl verbs.
func Commands() []*cli.Command {
	fileFlag := &cli.StringSliceFlag{Name: "filename", Aliases: []string{"f"}, Usage: "file, directory or - for stdin (repeatable)"}
	nsFlag := &cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, Usage: "namespace for namespaced kinds"}
	return []*cli.Command{
		{
			Name: "create", Usage: "create resources from files (fails if one exists)",
			Flags:  []cli.Flag{fileFlag, nsFlag, &cli.BoolFlag{Name: "skip-exists", Usage: "do not fail on resources that already exist"}},
			Action: withSession(cmdCreate),
		},
		{
			Name: "apply", Usage: "create or update resources from files",
			Flags: []cli.Flag{fileFlag, nsFlag, &cli.BoolFlag{Name: "dry-run",
				Usage: "write nothing: list the packets (endpoint, peer, protocol, port) whose policy verdict the change would change"}},
			Action: withSession(cmdApply),
		},
		{
			Name: "replace", Usage: "replace existing resources from files",
			Flags:  []cli.Flag{fileFlag, nsFlag},
			Action: withSession(cmdReplace),
		},
		{
			Name: "delete", Usage: "delete resources named in files or by KIND NAME...",
			ArgsUsage: "[KIND NAME...]",
			Flags:     []cli.Flag{fileFlag, nsFlag, &cli.BoolFlag{Name: "skip-not-exists", Usage: "do not fail on resources that do not exist"}},
			Action:    withSession(cmdDelete),
		},
		{
			Name: "get", Usage: "show resources",
			ArgsUsage: "KIND [NAME...]",
			Flags: []cli.Flag{fileFlag, nsFlag,
				&cli.BoolFlag{Name: "all-namespaces", Aliases: []string{"A"}, Usage: "list namespaced kinds across every namespace"},
				&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "ps", Usage: "ps, wide, yaml, json, name, custom-columns=COL,..., go-template=TEMPLATE or go-template-file=FILE"},
			},
			Action: withSession(cmdGet),
		},
		{
			Name: "patch", Usage: "apply a JSON merge patch to one resource",
			ArgsUsage: "KIND NAME",
			Flags:     []cli.Flag{nsFlag, &cli.StringFlag{Name: "patch", Aliases: []string{"p"}, Required: true, Usage: "JSON or YAML merge patch"}},
			Action:    withSession(cmdPatch),
		},
		labelCommand(),
		convertCommand(),
		ipamCommand(),
		policyCommand(),
		nodeCommand(),
		datastoreCommand(),
		versionCommand(),
	}
}

// session is what every verb runs with.
type session struct {
	ctx    context.Context
	c      *cli.Context
	store  datastore.Store
	out    io.Writer
	errOut io.Writer
	stdin  io.Reader
}

// withSession resolves the client config, connects and runs fn, which
// must be done within two minutes.
func withSession(fn func(*session) error) cli.ActionFunc {
	return withSessionTimeout(2*time.Minute, fn)
}

// withSessionTimeout is withSession with its own time limit, for verbs
// that read or write the whole datastore.
func withSessionTimeout(limit time.Duration, fn func(*session) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		cfg, err := configFromContext(c, os.Getenv)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(c.Context, limit)
		defer cancel()
		store, err := connect.New(ctx, cfg.Config)
		if err != nil {
			return fmt.Errorf("connect to datastore: %w", err)
		}
		defer store.Close()
		return fn(&session{ctx: ctx, c: c, store: store, out: c.App.Writer, errOut: c.App.ErrWriter, stdin: os.Stdin})
	}
}

// configFromContext layers default < config file < env < flags.
func configFromContext(c *cli.Context, getenv func(string) string) (ClientConfig, error) {
	var s settings
	file, err := loadConfigFile(c.String("config"), c.IsSet("config"))
	if err != nil {
		return ClientConfig{}, err
	}
	s.overlay(file)
	s.overlay(envSettings(getenv))
	s.overlay(settings{
		datastoreType: c.String("datastore-type"),
		kubeconfig:    c.String("kubeconfig"),
		endpoints:     c.String("etcd-endpoints"),
		keyFile:       c.String("etcd-key-file"),
		certFile:      c.String("etcd-cert-file"),
		caFile:        c.String("etcd-ca-cert-file"),
	})
	return s.resolve()
}
