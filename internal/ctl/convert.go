package ctl

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
	"sigs.k8s.io/yaml"

	"github.com/projectcalico/calico-node/internal/model/api"
)

func convertCommand() *cli.Command {
	return &cli.Command{
		Name:  "convert",
		Usage: "convert calicoctl v1, crd.projectcalico.org/v1 and Kubernetes NetworkPolicy documents to projectcalico.org/v3",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "filename", Aliases: []string{"f"}, Usage: "file, directory or - for stdin (repeatable)", Required: true},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "yaml", Usage: "yaml or json"},
			&cli.BoolFlag{Name: "ignore-validation", Usage: "print the converted documents even if they do not validate"},
		},
		// No datastore: conversion is local, as calicoctl's is.
		Action: func(c *cli.Context) error { return cmdConvert(c) },
	}
}

// cmdConvert prints the documents of -f as projectcalico.org/v3 resources,
// as calicoctl convert does: one document as itself, several as a v1
// List; uid, resourceVersion and creationTimestamp dropped; a Kubernetes
// NetworkPolicy as the Calico policy of the same name (without the
// knp.default. prefix the policy controller would give it). Documents
// already in v3 pass through, so a file mixing forms converts whole.
func cmdConvert(c *cli.Context) error {
	format := c.String("output")
	switch format {
	case "yaml", "yml":
		format = "yaml"
	case "json":
	default:
		return fmt.Errorf("unrecognized output format '%s'", format)
	}
	docs, err := readInputs(c.StringSlice("filename"), os.Stdin)
	if err != nil {
		return fmt.Errorf("failed to create resources from file: %w", err)
	}
	var out []api.Object
	for _, d := range docs {
		if d.Err != nil {
			return fmt.Errorf("failed to convert resource: %s: %w", d.label(), d.Err)
		}
		obj := d.Object
		obj.Type().APIVersion = api.GroupVersion
		m := obj.Meta()
		m.UID, m.ResourceVersion, m.CreationTimestamp, m.DeletionTimestamp, m.DeletionGracePeriodSeconds = "", "", "", "", nil
		if d.k8s {
			m.Name = strings.TrimPrefix(m.Name, "knp.default.")
		}
		if !c.Bool("ignore-validation") {
			if err := obj.Validate(); err != nil {
				return fmt.Errorf("converted manifest resource(s) failed validation: %s: %w. "+
					"Re-run the command with '--ignore-validation' flag to see the converted output", d.label(), err)
			}
		}
		out = append(out, obj)
	}
	var v any = out[0]
	if len(out) > 1 {
		v = map[string]any{"apiVersion": "v1", "kind": "List", "items": out}
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("failed to print results: %w", err)
	}
	if format == "yaml" {
		if data, err = yaml.JSONToYAML(data); err != nil {
			return fmt.Errorf("failed to print results: %w", err)
		}
		_, err = c.App.Writer.Write(data)
		return err
	}
	_, err = fmt.Fprintf(c.App.Writer, "%s\n", data)
	return err
}
