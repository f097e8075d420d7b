package ctl

import (
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// NormalizeArgs reorders a calicoctl command line (without the program
// name) so urfave/cli parses it the way calicoctl users type it: global
// flags anywhere go before the verb, the verb's own flags before its
// positional arguments. urfave/cli alone stops parsing flags at the first
// positional argument, so `calicoctl get ippools -o yaml` would fail.
func NormalizeArgs(args []string) []string {
	v := SplitGlobal(args)
	globals := append([]string{}, args[:v]...)
	global := flagArity(GlobalFlags())
	var rest []string
	for i := v; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		name := strings.TrimLeft(a, "-")
		if len(a) > 1 && a[0] == '-' {
			bare, _, hasValue := strings.Cut(name, "=")
			if takes, ok := global[bare]; ok {
				globals = append(globals, a)
				if takes && !hasValue && i+1 < len(args) {
					i++
					globals = append(globals, args[i])
				}
				continue
			}
		}
		rest = append(rest, a)
	}
	return append(globals, InterspersedArgs(rest)...)
}

func flagArity(flags []cli.Flag) map[string]bool {
	m := map[string]bool{}
	for _, f := range flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			m[n] = !isBool
		}
	}
	return m
}

// InterspersedArgs moves the flags of a verb in front of its positional
// arguments. args starts at the verb (e.g. ["get", "ippools", "-o", "yaml"]).
func InterspersedArgs(args []string) []string {
	if len(args) == 0 {
		return args
	}
	var cmd *cli.Command
	for _, c := range Commands() {
		if c.Name == args[0] || slices.Contains(c.Aliases, args[0]) {
			cmd = c
		}
	}
	if cmd == nil {
		return args
	}
	takesValue := flagArity(cmd.Flags)
	flags := []string{args[0]}
	var pos []string
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			pos = append(pos, args[i:]...)
			i = len(args)
		case (a == "--help" || a == "-h") && len(pos) > 0 && subcommandPath(cmd, pos):
			// Stays after the subcommands it follows, so that it asks for
			// the help of the last (`datastore migrate import -h`).
			pos = append(pos, a)
		case len(a) > 1 && a[0] == '-':
			flags = append(flags, a)
			name := strings.TrimLeft(a, "-")
			if !strings.Contains(name, "=") && takesValue[name] && i+1 < len(args) {
				i++
				flags = append(flags, args[i])
			}
		default:
			pos = append(pos, a)
		}
	}
	return append(flags, pos...)
}

// subcommandPath reports whether names are a chain of cmd's subcommands.
func subcommandPath(cmd *cli.Command, names []string) bool {
	for _, n := range names {
		var next *cli.Command
		for _, sc := range cmd.Subcommands {
			if sc.Name == n || slices.Contains(sc.Aliases, n) {
				next = sc
			}
		}
		if next == nil {
			return false
		}
		cmd = next
	}
	return true
}

// SplitGlobal finds where the verb starts in a calicoctl command line,
// skipping the global flags (and their values) before it.
func SplitGlobal(args []string) int {
	takesValue := flagArity(GlobalFlags())
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(a) < 2 || a[0] != '-' {
			return i
		}
		name := strings.TrimLeft(a, "-")
		if !strings.Contains(name, "=") && takesValue[name] {
			i++
		}
	}
	return len(args)
}
