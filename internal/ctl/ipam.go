package ctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/projectcalico/calico-node/internal/atomicfile"
	"github.com/projectcalico/calico-node/internal/buildinfo"
	"github.com/projectcalico/calico-node/internal/ipam"
)

// ipamFlags are the flags of every `ipam` subcommand. NormalizeArgs puts a
// verb's flags right after the verb ("ipam"), before the subcommand name,
// so the ipam command itself must know them all (hidden) to parse them
// and to tell which take a value; each subcommand declares its own for
// its help text, and ipamFlag reads whichever was set.
func ipamFlags(hidden bool) map[string]cli.Flag {
	return map[string]cli.Flag{
		"ip":                  &cli.StringFlag{Name: "ip", Usage: "the IP address", Hidden: hidden},
		"show-blocks":         &cli.BoolFlag{Name: "show-blocks", Usage: "show the blocks of each pool too", Hidden: hidden},
		"show-borrowed":       &cli.BoolFlag{Name: "show-borrowed", Usage: "show addresses borrowed from other nodes' blocks", Hidden: hidden},
		"show-configuration":  &cli.BoolFlag{Name: "show-configuration", Usage: "show the IPAM configuration", Hidden: hidden},
		"output":              &cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write a machine-readable report to `FILE`", Hidden: hidden},
		"show-all-ips":        &cli.BoolFlag{Name: "show-all-ips", Usage: "print every address checked", Hidden: hidden},
		"show-problem-ips":    &cli.BoolFlag{Name: "show-problem-ips", Usage: "print every address with a problem", Hidden: hidden},
		"kubeconfig":          &cli.StringFlag{Name: "kubeconfig", Usage: "accepted for compatibility; not needed with the etcd datastore", Hidden: hidden},
		"from-report":         &cli.StringSliceFlag{Name: "from-report", Usage: "release the leaked addresses and handles of this check report (repeatable: only those leaked in every report)", Hidden: hidden},
		"force":               &cli.BoolFlag{Name: "force", Usage: "use a report written by another calicoctl version", Hidden: hidden},
		"strictaffinity":      &cli.StringFlag{Name: "strictaffinity", Usage: "true: nodes never borrow addresses from other nodes' blocks", Hidden: hidden},
		"max-blocks-per-host": &cli.IntFlag{Name: "max-blocks-per-host", Usage: "most blocks a node may claim (0 = no limit; needs strict affinity)", Hidden: hidden},
	}
}

// hiddenFlags is every flag of a verb, hidden and sorted by name: the
// flags the verb's own command parses for its subcommands.
func hiddenFlags(flags func(hidden bool) map[string]cli.Flag) []cli.Flag {
	all := flags(true)
	out := make([]cli.Flag, 0, len(all))
	for _, name := range slices.Sorted(maps.Keys(all)) {
		out = append(out, all[name])
	}
	return out
}

func pickFlags(all map[string]cli.Flag, names ...string) []cli.Flag {
	out := make([]cli.Flag, len(names))
	for i, n := range names {
		out[i] = all[n]
	}
	return out
}

// ipamCommand is `calicoctl ipam`.
func ipamCommand() *cli.Command {
	f := ipamFlags(false)
	return &cli.Command{
		Name:            "ipam",
		Usage:           "IP address management: show, check, release, configure",
		Flags:           hiddenFlags(ipamFlags),
		HideHelpCommand: true,
		Subcommands: []*cli.Command{
			{
				Name:   "show",
				Usage:  "show IP pool and block usage, or who holds an address",
				Flags:  pickFlags(f, "ip", "show-blocks", "show-borrowed", "show-configuration"),
				Action: withSession(cmdIPAMShow),
			},
			{
				Name:   "check",
				Usage:  "check IPAM against workload endpoints and nodes: leaked addresses, handles without addresses, blocks of missing nodes",
				Flags:  pickFlags(f, "output", "show-all-ips", "show-problem-ips", "kubeconfig"),
				Action: withSession(cmdIPAMCheck),
			},
			{
				Name:   "release",
				Usage:  "release an address (--ip) or the leaked addresses of check reports (--from-report)",
				Flags:  pickFlags(f, "ip", "from-report", "force"),
				Action: withSession(cmdIPAMRelease),
			},
			{
				Name:   "configure",
				Usage:  "change the IPAM configuration",
				Flags:  pickFlags(f, "strictaffinity", "max-blocks-per-host"),
				Action: withSession(cmdIPAMConfigure),
			},
		},
	}
}

// ipamFlag finds where a flag was set: on the subcommand or, after
// NormalizeArgs moved it, on the ipam command.
func ipamFlag(c *cli.Context, name string) (*cli.Context, bool) {
	for _, cc := range c.Lineage() {
		if cc.Command != nil && cc.IsSet(name) {
			return cc, true
		}
	}
	return c, false
}

func ipamString(c *cli.Context, name string) string {
	cc, _ := ipamFlag(c, name)
	return cc.String(name)
}

func ipamBool(c *cli.Context, name string) bool {
	cc, _ := ipamFlag(c, name)
	return cc.Bool(name)
}

func ipamStrings(c *cli.Context, name string) []string {
	var out []string
	for _, cc := range c.Lineage() {
		if cc.Command == nil {
			continue
		}
		out = append(out, cc.StringSlice(name)...)
	}
	return out
}

func (s *session) ipam() *ipam.Client {
	return ipam.New(s.store.IPAM(), s.store, slog.New(slog.NewTextHandler(s.errOut, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

func parseIPFlag(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("invalid IP address %q", s)
	}
	return a.Unmap(), nil
}

func cmdIPAMShow(s *session) error {
	c := s.ipam()
	switch {
	case ipamString(s.c, "ip") != "":
		ip, err := parseIPFlag(ipamString(s.c, "ip"))
		if err != nil {
			return err
		}
		h, err := c.Lookup(s.ctx, ip)
		if errors.Is(err, ipam.ErrNotAllocated) {
			fmt.Fprintf(s.out, "%s is not assigned\n", ip)
			return nil
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(s.out, "IP %s is in use\n", ip)
		handle := h.Handle
		if handle == "" {
			handle = "<none>"
		}
		fmt.Fprintf(s.out, "Handle: %s\nBlock: %s (affinity %s)\n", handle, h.Block, orNone(h.Affinity))
		if len(h.Attrs) == 0 {
			fmt.Fprintln(s.out, "No attributes defined")
			return nil
		}
		fmt.Fprintln(s.out, "Attributes:")
		for _, k := range slices.Sorted(maps.Keys(h.Attrs)) {
			fmt.Fprintf(s.out, "  %s: %s\n", k, h.Attrs[k])
		}
		return nil
	case ipamBool(s.c, "show-configuration"):
		cfg, err := c.Config(s.ctx)
		if err != nil {
			return err
		}
		return renderTable(s.out, []string{"PROPERTY", "VALUE"}, [][]string{
			{"StrictAffinity", strconv.FormatBool(cfg.StrictAffinity)},
			{"AutoAllocateBlocks", strconv.FormatBool(cfg.AutoAllocateBlocks)},
			{"MaxBlocksPerHost", strconv.Itoa(cfg.MaxBlocksPerHost)},
		})
	case ipamBool(s.c, "show-borrowed"):
		rep, err := c.Check(s.ctx)
		if err != nil {
			return err
		}
		owners := map[string]string{}
		for _, b := range rep.Stats.BlockList {
			owners[b.CIDR] = b.Node
		}
		var rows [][]string
		for _, a := range rep.SortedAllocations() {
			if !a.Borrowed {
				continue
			}
			typ, to := a.Type, ""
			if a.Pod != "" {
				typ, to = "pod", a.Namespace+"/"+a.Pod
			}
			rows = append(rows, []string{a.IP, a.Node, a.Block.String(), owners[a.Block.String()], typ, to})
		}
		return renderTable(s.out, []string{"IP", "BORROWING-NODE", "BLOCK", "BLOCK OWNER", "TYPE", "ALLOCATED-TO"}, rows)
	}
	u, err := c.Usage(s.ctx)
	if err != nil {
		return err
	}
	showBlocks := ipamBool(s.c, "show-blocks")
	header := []string{"GROUPING", "CIDR", "IPS TOTAL", "IPS IN USE", "IPS FREE"}
	if showBlocks {
		header = append(header, "AFFINITY")
	}
	row := func(kind, cidr string, inUse, total float64, affinity string) []string {
		r := []string{kind, cidr, fmt.Sprintf("%.5g", total),
			fmt.Sprintf("%.5g (%.f%%)", inUse, 100*inUse/total),
			fmt.Sprintf("%.5g (%.f%%)", total-inUse, 100*(total-inUse)/total)}
		if showBlocks {
			r = append(r, affinity)
		}
		return r
	}
	var rows [][]string
	for _, p := range u.Pools {
		rows = append(rows, row("IP Pool", p.CIDR.String(), float64(p.InUse), p.Size, ""))
		if !showBlocks {
			continue
		}
		for _, b := range u.Blocks {
			if b.Pool == p.Name {
				rows = append(rows, row("Block", b.CIDR.String(), float64(b.Size-b.Free), float64(b.Size), orNone(b.Affinity)))
			}
		}
	}
	if showBlocks {
		// Blocks outside every pool (the pool was deleted): Calico's
		// "orphaned allocation blocks".
		for _, b := range u.Blocks {
			if b.Pool == "" {
				rows = append(rows, row("Block", b.CIDR.String(), float64(b.Size-b.Free), float64(b.Size), orNone(b.Affinity)))
			}
		}
	}
	return renderTable(s.out, header, rows)
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func cmdIPAMCheck(s *session) error {
	showAll := ipamBool(s.c, "show-all-ips")
	showProblems := showAll || ipamBool(s.c, "show-problem-ips")
	out := s.out
	fmt.Fprint(out, "Checking IPAM for inconsistencies...\n\n")
	rep, err := s.ipam().Check(s.ctx)
	if err != nil {
		return err
	}
	rep.Version = buildinfo.Version
	st := rep.Stats

	fmt.Fprintln(out, "Loading all IPAM blocks...")
	fmt.Fprintf(out, "Found %d IPAM blocks.\n", st.Blocks)
	for _, b := range st.BlockList {
		aff := "<none>"
		if b.Affinity != "" {
			aff = b.Affinity
		}
		fmt.Fprintf(out, " IPAM block %s affinity=%s:\n", b.CIDR, aff)
	}
	if showAll {
		for _, a := range rep.SortedAllocations() {
			fmt.Fprintf(out, "  %s allocated; attrs %s\n", a.IP, attrString(a))
		}
	}
	fmt.Fprintf(out, "IPAM blocks record %d allocations.\n\n", st.Allocations)

	fmt.Fprintln(out, "Loading all IPAM pools...")
	for _, p := range st.ActivePools {
		fmt.Fprintf(out, "  %s\n", p)
	}
	fmt.Fprintf(out, "Found %d active IP pools.\n\n", len(st.ActivePools))

	fmt.Fprintln(out, "Loading all nodes.")
	fmt.Fprintf(out, "Found %d node tunnel IPs.\n\n", st.NodeIPs)
	fmt.Fprintln(out, "Loading all service load balancer IPs.")
	fmt.Fprintf(out, "Found %d service load balancer(s).\n\n", st.LoadBalancerServices)
	fmt.Fprintln(out, "Loading all workload endpoints.")
	if showAll {
		for _, a := range rep.SortedAllocations() {
			for _, o := range a.Owners {
				fmt.Fprintf(out, "  %s belongs to %s\n", a.IP, o)
			}
		}
	}
	fmt.Fprintf(out, "Found %d workload IPs.\n", st.WorkloadIPs)
	fmt.Fprintf(out, "Workloads and nodes are using %d IPs.\n\n", st.InUseIPs)

	fmt.Fprintln(out, "Loading all handles")
	fmt.Fprintln(out, "Looking for top (up to 20) nodes by allocations...")
	nodes := slices.Collect(maps.Keys(st.AllocationsByNode))
	slices.SortFunc(nodes, func(a, b string) int {
		if d := st.AllocationsByNode[b] - st.AllocationsByNode[a]; d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	for i, n := range nodes {
		if i == 20 {
			break
		}
		fmt.Fprintf(out, "  %s has %d allocations\n", n, st.AllocationsByNode[n])
	}
	if len(nodes) > 0 {
		fmt.Fprintf(out, "Node with most allocations has %d; median is %d\n",
			st.AllocationsByNode[nodes[0]], st.AllocationsByNode[nodes[len(nodes)/2]])
	}
	fmt.Fprintln(out)

	fmt.Fprintln(out, "Scanning for IPs that are allocated but not actually in use...")
	leaked := rep.Leaked()
	if showProblems {
		for _, a := range leaked {
			fmt.Fprintf(out, "  %s leaked; attrs %s\n", a.IP, attrString(a))
		}
	}
	fmt.Fprintf(out, "Found %d IPs that are allocated in IPAM but not actually in use.\n", len(leaked))
	fmt.Fprintln(out, "Scanning for IPs that are in use by a workload or node but not allocated in IPAM...")
	if showProblems {
		for _, u := range rep.InUseNotInPool {
			fmt.Fprintf(out, "  %s in use by %s is not in any active IP pool.\n", u.IP, strings.Join(u.Owners, ", "))
		}
		for _, u := range rep.InUseNotAllocated {
			fmt.Fprintf(out, "  %s in use by %s and in active IPAM pool but has no IPAM allocation.\n", u.IP, strings.Join(u.Owners, ", "))
		}
	}
	fmt.Fprintf(out, "Found %d in-use IPs that are not in active IP pools.\n", len(rep.InUseNotInPool))
	fmt.Fprintf(out, "Found %d in-use IPs that are in active IP pools but have no corresponding IPAM allocation.\n\n", len(rep.InUseNotAllocated))

	fmt.Fprintln(out, "Scanning for IPAM handles with no matching IPs...")
	if showProblems {
		for _, h := range rep.LeakedHandles {
			fmt.Fprintf(out, "  %s doesn't have any active IPs.\n", h.ID)
		}
	}
	fmt.Fprintf(out, "Found %d handles with no matching IPs (and %d handles with matches).\n",
		len(rep.LeakedHandles), st.Handles-len(rep.LeakedHandles))
	fmt.Fprintln(out, "Scanning for IPs with missing handle...")
	if showProblems {
		for _, h := range rep.MissingHandles {
			fmt.Fprintf(out, "  %s is in use in a block but doesn't exist.\n", h)
		}
	}
	fmt.Fprintf(out, "Found %d handles mentioned in blocks with no matching handle resource.\n", len(rep.MissingHandles))
	fmt.Fprintln(out, "Scanning for blocks affine to nodes that do not exist...")
	if showProblems {
		for _, b := range rep.BlocksOfMissingNodes {
			fmt.Fprintf(out, "  block %s is affine to missing node %s.\n", b.CIDR, b.Node)
		}
	}
	fmt.Fprintf(out, "Found %d blocks affine to nodes that do not exist.\n", len(rep.BlocksOfMissingNodes))
	fmt.Fprintf(out, "Check complete; found %d problems.\n", rep.Problems())

	if file := ipamString(s.c, "output"); file != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return fmt.Errorf("encode report: %w", err)
		}
		if err := atomicfile.WriteFile(file, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	}
	return nil
}

// attrString is calicoctl's rendering of an allocation's attributes.
func attrString(a *ipam.Allocation) string {
	main := a.Handle
	if main == "" {
		main = "<none>"
	}
	var kvs []string
	for _, k := range slices.Sorted(maps.Keys(a.Attrs)) {
		kvs = append(kvs, k+"="+a.Attrs[k])
	}
	return fmt.Sprintf("Main:%s Extra:%s", main, strings.Join(kvs, ","))
}

func cmdIPAMRelease(s *session) error {
	c := s.ipam()
	reports := ipamStrings(s.c, "from-report")
	ipFlag := ipamString(s.c, "ip")
	if len(reports) == 0 && ipFlag == "" {
		return errors.New("give --ip=ADDRESS or --from-report=FILE")
	}
	if len(reports) > 0 {
		force := ipamBool(s.c, "force")
		var loaded []*ipam.CheckReport
		for _, file := range reports {
			data, err := os.ReadFile(file)
			if err != nil {
				return fmt.Errorf("read report: %w", err)
			}
			var r ipam.CheckReport
			if err := json.Unmarshal(data, &r); err != nil {
				return fmt.Errorf("report %s: %w", file, err)
			}
			if r.Version != buildinfo.Version {
				if !force {
					return fmt.Errorf("the report %s was produced by a different version (%s) of calicoctl; refusing to release (use --force to override)", file, r.Version)
				}
				fmt.Fprintln(s.out, "WARNING: Report was produced using a different version of calicoctl. Ignoring due to --force option")
			}
			loaded = append(loaded, &r)
		}
		res, err := c.ReleaseLeaked(s.ctx, loaded...)
		if err != nil {
			return err
		}
		n := len(res.Released) + len(res.Skipped)
		if n == 0 {
			fmt.Fprintln(s.out, "Report didn't contain any leaked IPs to clean up.")
		} else {
			fmt.Fprintf(s.out, "Releasing %d old IPs...\n", n)
			fmt.Fprintf(s.out, "Released %d IPs successfully\n", len(res.Released))
			if len(res.Skipped) > 0 {
				fmt.Fprintf(s.out, "%d addresses marked as leaked in the report are no longer leaked (in use, released or reassigned since) and were left alone.\n", len(res.Skipped))
			}
		}
		if h := len(res.HandlesDeleted) + len(res.HandlesSkipped); h == 0 {
			fmt.Fprintln(s.out, "Report didn't contain any handles to clean up.")
		} else {
			fmt.Fprintf(s.out, "Deleting %d handles...\n", h)
			fmt.Fprintf(s.out, "Released %d handles; %d skipped; 0 errors.\n", len(res.HandlesDeleted), len(res.HandlesSkipped))
		}
	}
	if ipFlag != "" {
		ip, err := parseIPFlag(ipFlag)
		if err != nil {
			return err
		}
		unallocated, err := c.ReleaseIPs(s.ctx, ip)
		if err != nil {
			return err
		}
		if len(unallocated) > 0 {
			return fmt.Errorf("IP address %s is not assigned", ip)
		}
		fmt.Fprintf(s.out, "Successfully released IP address %s\n", ip)
	}
	return nil
}

func cmdIPAMConfigure(s *session) error {
	c := s.ipam()
	cfg, err := c.Config(s.ctx)
	if err != nil {
		return err
	}
	if v := ipamString(s.c, "strictaffinity"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("--strictaffinity: %q is not true or false", v)
		}
		cfg.StrictAffinity = b
	} else if _, set := ipamFlag(s.c, "max-blocks-per-host"); !set {
		return errors.New("give --strictaffinity=true|false and/or --max-blocks-per-host=N")
	}
	if cc, set := ipamFlag(s.c, "max-blocks-per-host"); set {
		cfg.MaxBlocksPerHost = cc.Int("max-blocks-per-host")
	}
	if err := c.SetConfig(s.ctx, cfg); err != nil {
		return err
	}
	fmt.Fprintln(s.out, "Successfully set IPAM configuration")
	return nil
}

// renderTable draws the bordered table calicoctl prints (tablewriter's
// default style): headers centred, numbers right-aligned, text left.
func renderTable(w io.Writer, header []string, rows [][]string) error {
	widths := make([]int, len(header))
	for i, h := range header {
		widths[i] = utf8.RuneCountInString(h)
	}
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	sep := func() {
		b.WriteByte('+')
		for _, w := range widths {
			b.WriteString(strings.Repeat("-", w+2))
			b.WriteByte('+')
		}
		b.WriteByte('\n')
	}
	line := func(cells []string, align func(i int, c string) string) {
		b.WriteByte('|')
		for i := range widths {
			c := ""
			if i < len(cells) {
				c = cells[i]
			}
			b.WriteString(" " + align(i, c) + " |")
		}
		b.WriteByte('\n')
	}
	sep()
	line(header, func(i int, c string) string {
		pad := widths[i] - utf8.RuneCountInString(c)
		return strings.Repeat(" ", pad/2) + c + strings.Repeat(" ", pad-pad/2)
	})
	sep()
	for _, r := range rows {
		line(r, func(i int, c string) string {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			if _, err := strconv.ParseFloat(c, 64); err == nil {
				return pad + c
			}
			return c + pad
		})
	}
	sep()
	_, err := io.WriteString(w, b.String())
	return err
}
