package epstatus

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Source is one agent asked for a timeline: its socket, and its answer
// or why there is none.
type Source struct {
	Socket string
	Answer *Answer
	Err    error
}

// ErrNoTimeline: no agent asked keeps a timeline of the endpoint.
var ErrNoTimeline = fmt.Errorf("no timeline kept for it by the agents asked (each keeps its last %d endpoints)", DefaultMaxRecords)

// WriteTimeline prints the endpoint's timeline from the agents' answers:
// the stages its own node recorded, then, for every other agent asked,
// when that node had it programmed (or why that is not known).
func WriteTimeline(w io.Writer, namespace, name string, sources []Source) error {
	home, homeSrc := latest(sources, namespace, name, "", true)
	ref := home
	if ref == nil {
		ref, _ = latest(sources, namespace, name, "", false)
	}
	if ref == nil {
		for _, s := range sources {
			if s.Err != nil {
				fmt.Fprintf(w, "%s: %v\n", s.Socket, s.Err)
			}
		}
		return fmt.Errorf("%s/%s: %w", namespace, name, ErrNoTimeline)
	}
	start := ref.Start()
	if home == nil {
		// Only other nodes know it: offsets from the earliest of them.
		for _, s := range sources {
			if r := matching(s, ref, false); r != nil && r.Start().Before(start) {
				start = r.Start()
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Endpoint %s/%s: workload endpoint %s on node %s\n", ref.Namespace, displayName(ref), ref.Endpoint, ref.EndpointNode)
	var facts []string
	if ref.ContainerID != "" {
		facts = append(facts, "container "+ref.ContainerID)
	}
	if ref.Revision != "" {
		facts = append(facts, "revision "+ref.Revision)
	}
	if len(ref.Addresses) > 0 {
		facts = append(facts, "addresses "+strings.Join(ref.Addresses, ", "))
	}
	if len(facts) > 0 {
		b.WriteString(strings.Join(facts, ", ") + "\n")
	}
	if home == nil {
		fmt.Fprintf(&b, "(the agent of node %s was not asked or keeps no record: its stages are missing)\n", ref.EndpointNode)
	} else if home.Error != "" {
		fmt.Fprintf(&b, "ADD failed: %s\n", home.Error)
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tAFTER\tAT")
	row := func(label string, at time.Time, ok bool, why string) {
		if !ok {
			fmt.Fprintf(tw, "%s\t-\t%s\n", label, why)
			return
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", label, offset(at.Sub(start)), at.UTC().Format("2006-01-02T15:04:05.000000Z"))
	}
	if home != nil {
		servedADD := false
		if _, ok := home.At(StageADDReceived); ok {
			servedADD = true
		}
		for _, st := range Stages {
			if st == StageRemoteProgrammed {
				continue
			}
			at, ok := home.At(st)
			why := "not yet"
			switch {
			case !servedADD && (st == StageADDReceived || st == StageIPAM || st == StageVeth || st == StageEndpointWritten || st == StageADDReturned):
				why = "not recorded: the ADD did not run in the agent"
			case st == StageAdvertised && !homeSrc.Answer.BGP:
				why = "no BGP on this node"
			case home.Error != "" && st == StageADDReturned:
				why = "ADD failed"
			}
			row(st.Describe(), at, ok, why)
		}
	}
	others := append([]Source(nil), sources...)
	sort.SliceStable(others, func(i, j int) bool { return sourceName(others[i]) < sourceName(others[j]) })
	for _, s := range others {
		if s.Answer != nil && s.Answer.Node == ref.EndpointNode {
			continue
		}
		label := StageRemoteProgrammed.Describe() + " " + sourceName(s)
		switch r := matching(s, ref, false); {
		case s.Err != nil:
			row(label, time.Time{}, false, "not reachable: "+s.Err.Error())
		case r == nil:
			row(label, time.Time{}, false, "no record on that node")
		default:
			at, ok := r.At(StageRemoteProgrammed)
			row(label, at, ok, "not yet")
		}
	}
	tw.Flush()
	_, err := io.WriteString(w, b.String())
	return err
}

// latest is the newest record of the endpoint among the answers: its own
// node's when local, another node's otherwise; of container when given.
func latest(sources []Source, namespace, name, container string, local bool) (*Record, *Source) {
	var best *Record
	var from *Source
	for i := range sources {
		s := &sources[i]
		if s.Answer == nil {
			continue
		}
		for j := range s.Answer.Records {
			r := &s.Answer.Records[j]
			if !r.Matches(namespace, name) || (r.Node == r.EndpointNode) != local {
				continue
			}
			if container != "" && r.ContainerID != container {
				continue
			}
			if best == nil || r.Start().After(best.Start()) {
				best, from = r, s
			}
		}
	}
	return best, from
}

// matching is s's newest record of ref's endpoint and container.
func matching(s Source, ref *Record, local bool) *Record {
	if s.Answer == nil {
		return nil
	}
	r, _ := latest([]Source{s}, ref.Namespace, ref.Endpoint, ref.ContainerID, local)
	return r
}

func sourceName(s Source) string {
	if s.Answer != nil {
		return s.Answer.Node
	}
	return s.Socket
}

func displayName(r *Record) string {
	if r.Pod != "" {
		return r.Pod
	}
	return r.Endpoint
}

// offset prints a duration to 0.1 ms.
func offset(d time.Duration) string {
	if d < 0 {
		return "-" + offset(-d)
	}
	return d.Round(100 * time.Microsecond).String()
}
