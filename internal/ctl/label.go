package ctl

import (
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/projectcalico/calico-node/internal/model/api"
)

func labelCommand() *cli.Command {
	return &cli.Command{
		Name:      "label",
		Usage:     "add, change or remove a label of one resource",
		ArgsUsage: "KIND NAME (KEY=VALUE [--overwrite] | KEY --remove)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, Usage: "namespace for namespaced kinds"},
			&cli.BoolFlag{Name: "overwrite", Usage: "replace the value of a label the resource already has"},
			&cli.BoolFlag{Name: "remove", Usage: "remove the label KEY (an error if the resource has no such label)"},
		},
		Action: withSession(cmdLabel),
	}
}

// cmdLabel is calicoctl's label: read the resource as clientv3 reads it,
// change its labels, write it back at the version read (a concurrent
// writer makes it a conflict, not a lost update). Messages are
// calicoctl's.
func cmdLabel(s *session) error {
	args := s.c.Args().Slice()
	remove, overwrite := s.c.Bool("remove"), s.c.Bool("overwrite")
	if len(args) != 3 {
		return errors.New("usage: calicoctl label KIND NAME (KEY=VALUE [--overwrite] | KEY --remove)")
	}
	if remove && overwrite {
		return errors.New("--overwrite cannot be used with --remove")
	}
	kind, name, kv := args[0], args[1], args[2]
	var key, value string
	if remove {
		key = kv
	} else {
		parts := strings.Split(kv, "=")
		if len(parts) != 2 {
			return fmt.Errorf("invalid label %s", kv)
		}
		key, value = parts[0], parts[1]
	}
	info, ok := api.LookupKind(kind)
	if !ok {
		return fmt.Errorf("unknown resource kind %q", kind)
	}
	if err := readOnly("label", info.Kind, "", name); err != nil {
		return err
	}
	ns := ""
	if info.Namespaced {
		if ns = s.c.String("namespace"); ns == "" {
			ns = "default"
		}
	}
	obj, err := s.store.Get(s.ctx, info.Kind, ns, name)
	if err != nil {
		return fmt.Errorf("failed to get %s %s, error %w", kind, name, err)
	}
	clientView(obj)
	m := obj.Meta()
	labels := maps.Clone(m.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	old, had := labels[key]
	verb := "set"
	switch {
	case remove && !had:
		return fmt.Errorf("cannot remove label of %s %s, key %s does not exist", kind, name, key)
	case remove:
		delete(labels, key)
		verb = "removed"
	case had && !overwrite && old != value:
		return fmt.Errorf("failed to update label of %s %s, key %s is already present. please use '--overwrite' to set a new value", kind, name, key)
	case had:
		labels[key] = value
		verb = "updated"
	default:
		labels[key] = value
	}
	m.Labels = labels
	if _, err := s.store.Update(s.ctx, obj); err != nil {
		return fmt.Errorf("failed to update %s %s, label not changed: %w", kind, name, err)
	}
	switch verb {
	case "removed":
		fmt.Fprintf(s.out, "Successfully removed label %s from %s %s\n", key, kind, name)
	case "updated":
		fmt.Fprintf(s.out, "Successfully updated label %s on %s %s\n", key, kind, name)
	default:
		fmt.Fprintf(s.out, "Successfully set label %s on %s %s\n", key, kind, name)
	}
	return nil
}
