package explain

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// WriteText writes the explanation for a person: the verdict, then each
// node's sections and steps, each step with the iptables rules it
// corresponds to (table, chain, rule number, hash and, with --live, the
// kernel's packet counter).
func (e *Explanation) WriteText(w io.Writer) error {
	var b strings.Builder
	p := e.Packet
	fmt.Fprintf(&b, "%s %s -> %s: %s\n", p.Protocol, endpointAddr(p.Source, p.SourcePort), endpointAddr(p.Destination, p.DestinationPort), e.Verdict)
	if p.ICMPType != nil {
		fmt.Fprintf(&b, "  icmp type %d code %d\n", *p.ICMPType, *p.ICMPCode)
	}
	fmt.Fprintf(&b, "  from %s\n  to   %s\n", describeEnd(e.From), describeEnd(e.To))
	for _, pr := range e.Problems {
		fmt.Fprintf(&b, "  note: %s\n", pr)
	}
	if r := e.Reply; r != nil {
		if r.Verdict == Allow {
			fmt.Fprintf(&b, "  replies (%s): %s\n", r.State, r.Verdict)
		} else {
			fmt.Fprintf(&b, "  but its replies (%s) are denied: the connection cannot work\n", r.State)
		}
	}
	writeHops(&b, e.Hops)
	if r := e.Reply; r != nil && r.Verdict != Allow {
		rp := r.Packet
		fmt.Fprintf(&b, "\nreply %s %s -> %s (%s): %s\n", rp.Protocol, endpointAddr(rp.Source, rp.SourcePort),
			endpointAddr(rp.Destination, rp.DestinationPort), r.State, r.Verdict)
		writeHops(&b, r.Hops)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeHops(b *strings.Builder, hops []Hop) {
	for _, h := range hops {
		fmt.Fprintf(b, "\nnode %s (%s", h.Node, h.Path)
		if h.In != "" {
			fmt.Fprintf(b, ", in %s", h.In)
		}
		if h.Out != "" {
			fmt.Fprintf(b, ", out %s", h.Out)
		}
		fmt.Fprintf(b, "): %s", h.Verdict)
		if h.DecidedIn != "" {
			fmt.Fprintf(b, " in %s", h.DecidedIn)
		}
		if h.Untracked {
			b.WriteString(" (untracked)")
		}
		b.WriteByte('\n')
		for _, s := range h.Sections {
			writeSection(b, &s)
		}
	}
}

func writeSection(b *strings.Builder, s *Section) {
	if s.Endpoint != "" {
		kind := ""
		if s.PolicyKind != "normal" {
			kind = " (" + s.PolicyKind + " policy)"
		}
		fmt.Fprintf(b, "  %s of %s %s%s, %s %s: %s\n", s.Direction, s.EndpointKind, s.Endpoint, kind, s.Table, s.Chain, s.Verdict)
	} else {
		fmt.Fprintf(b, "  %s table:\n", s.Table)
	}
	// Tiers and profiles at the top, a tier's policies and default action
	// under it, a policy's or profile's rules under that.
	parent := 0
	for _, st := range s.Steps {
		level := 0
		switch st.Kind {
		case StepPolicy, StepTierDefault:
			level, parent = 1, 1
		case StepProfile:
			parent = 0
		case StepRule, StepNoRule:
			level = parent + 1
		}
		indent := strings.Repeat("  ", 2+level)
		fmt.Fprintf(b, "%s%s\n", indent, st.Text)
		for _, r := range st.Rules {
			fmt.Fprintf(b, "%s  = %s\n", indent, r.Ref())
		}
	}
}

// Ref names the rule: "filter cali-tw-cali1 #4 cali:<hash>", and its
// counters when read.
func (r IptablesRule) Ref() string {
	s := fmt.Sprintf("%s %s #%d %s", r.Table, r.Chain, r.Number, r.Hash)
	if r.Packets != nil {
		s += fmt.Sprintf(" [%d packets, %d bytes]", *r.Packets, *r.Bytes)
	}
	return s
}

func endpointAddr(a string, port uint16) string {
	if port == 0 {
		return a
	}
	if strings.Contains(a, ":") {
		return "[" + a + "]:" + strconv.Itoa(int(port))
	}
	return a + ":" + strconv.Itoa(int(port))
}

func describeEnd(e End) string {
	if e.Kind == KindAddress {
		return e.Name + " (an address of no endpoint)"
	}
	var extra []string
	if e.Node != "" && e.Kind != KindNode {
		extra = append(extra, "on "+e.Node)
	}
	if e.Interface != "" {
		extra = append(extra, e.Interface)
	}
	if e.Address != "" {
		extra = append(extra, e.Address)
	}
	return fmt.Sprintf("%s %s (%s)", e.Kind, e.Name, strings.Join(extra, ", "))
}
