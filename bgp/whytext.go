package bgp

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteRoutes prints rep as `calicoctl node routes` does: one row per
// path, BIRD's `show route` as a table. AGE is how long ago the path was
// received; BEST is "yes" for the path the speaker chose, "filtered" for
// one the import policy rejected; KERNEL, on the best path, says whether
// the route it asks for is in the kernel (`bgp why` tells why not).
func WriteRoutes(w io.Writer, rep *RoutesReport, now time.Time) error {
	var b strings.Builder
	if len(rep.Routes) == 0 {
		b.WriteString("No routes.\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	var rows [][]string
	for _, r := range rep.Routes {
		from := r.From
		if from == "" {
			from = "local"
		}
		if r.Stale {
			from += " (stale)"
		}
		best := "no"
		switch {
		case r.Filtered:
			best = "filtered"
		case r.Best:
			best = "yes"
		}
		kernel := r.Kernel
		if kernel == "" {
			kernel = "-"
		}
		rows = append(rows, []string{r.Prefix, r.NextHop, from, age(now, r.Received), best, kernel})
	}
	writeTable(&b, []string{"Prefix", "Next hop", "From", "Age", "Best", "Kernel"}, rows)
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteWhy prints rep as `calicoctl node bgp why` does.
func WriteWhy(w io.Writer, rep *WhyReport) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s on node %s\n", rep.Prefix, rep.Node)
	fmt.Fprintf(&b, "Origin: %s\n", rep.Origin)
	if rep.Withdrawn != "" {
		fmt.Fprintf(&b, "Withdrawn: %s\n", rep.Withdrawn)
	}
	b.WriteString("\nPeers:\n")
	if len(rep.Peers) == 0 {
		b.WriteString("  none configured\n")
	}
	for _, p := range rep.Peers {
		fmt.Fprintf(&b, "  %s (%s, %s, %s)\n", p.Peer, p.Name, p.Type, p.State)
		fmt.Fprintf(&b, "    received: %s\n", p.Received)
		fmt.Fprintf(&b, "    sent:     %s: %s\n", p.Sent, p.Detail)
	}
	k := rep.Kernel
	b.WriteString("\nKernel:\n")
	if k.Wanted != "" {
		fmt.Fprintf(&b, "  wanted:      %s (%s)\n", k.Wanted, k.Reason)
	} else {
		fmt.Fprintf(&b, "  wanted:      nothing (%s)\n", k.Reason)
	}
	for i, l := range k.RouteTable {
		head := "  route table: "
		if i > 0 {
			head = "               "
		}
		b.WriteString(head + l + "\n")
	}
	if len(k.Kernel) == 0 {
		b.WriteString("  kernel:      no route to " + rep.Prefix + "\n")
	}
	for i, l := range k.Kernel {
		head := "  kernel:      "
		if i > 0 {
			head = "               "
		}
		b.WriteString(head + l + "\n")
	}
	fmt.Fprintf(&b, "  verdict:     %s\n", k.Verdict)
	_, err := io.WriteString(w, b.String())
	return err
}
