package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// phases is where one change's latency went, from the agent's debug
// lines "policy programmed" (agent.Policy) and "programmed"
// (xtables.Programmer), and the garbage collections that ran meanwhile.
type phases struct {
	total time.Duration // etcd write start -> Apply returned
	// arrive is the write's start to the policy actor holding the
	// update (etcd, the watch, confwatch's decode and fan-out).
	arrive time.Duration
	// waited is the actor's wait from the update to its program
	// starting (coalescing, a program still running).
	waited, snapshot, compile, apply time.Duration
	// The programmer: reading the kernel back, ipset restore (parallel:
	// beside the tables), hash + diff + iptables-restore, the restore.
	read, ipset, tables, restore time.Duration
	parallel                     bool
	gcs                          int           // garbage collections started during the change
	gcPause                      time.Duration // their stop-the-world pauses (in-process only)
}

// phaseRecord is one parsed debug line: its arrival and its attributes.
type phaseRecord struct {
	at    time.Time
	msg   string
	attrs map[string]string
}

func (r phaseRecord) dur(key string) time.Duration {
	d, _ := time.ParseDuration(r.attrs[key])
	return d
}

// addProgrammed fills p from a "policy programmed" record and the
// programmer's "programmed" record before it (nil: the Apply wrote
// nothing); start is the etcd write's start.
func (p *phases) addProgrammed(start time.Time, pol phaseRecord, prog *phaseRecord) {
	p.waited, p.snapshot, p.compile, p.apply = pol.dur("waited"), pol.dur("snapshot"), pol.dur("compile"), pol.dur("apply")
	received := pol.at.Add(-p.apply - p.compile - p.snapshot - p.waited)
	p.arrive = received.Sub(start)
	if prog != nil {
		p.read, p.ipset, p.tables, p.restore = prog.dur("read"), prog.dur("ipset"), prog.dur("tables"), prog.dur("restore")
		p.parallel = prog.attrs["parallel"] == "true"
	}
}

// phaseCapture is a slog handler that keeps the two debug lines, for the
// in-process agent.
type phaseCapture struct {
	mu   sync.Mutex
	recs chan phaseRecord
}

func newPhaseCapture() *phaseCapture { return &phaseCapture{recs: make(chan phaseRecord, 64)} }

func (c *phaseCapture) Enabled(context.Context, slog.Level) bool { return true }

func (c *phaseCapture) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "policy programmed" && r.Message != "programmed" {
		return nil
	}
	rec := phaseRecord{at: r.Time, msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	select {
	case c.recs <- rec:
	default: // nobody reading (the snapshot's first program)
	}
	return nil
}

func (c *phaseCapture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *phaseCapture) WithGroup(string) slog.Handler      { return c }

// drain drops what arrived before a change was written.
func drain[T any](c <-chan T) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// nextProgrammed waits for the "policy programmed" record of a program
// that received its update after start, keeping the programmer's record
// just before it.
func nextProgrammed(recs <-chan phaseRecord, start time.Time, timeout time.Duration) (phaseRecord, *phaseRecord, error) {
	deadline := time.After(timeout)
	var prog *phaseRecord
	for {
		select {
		case r := <-recs:
			if r.msg == "programmed" {
				prog = &r
				continue
			}
			received := r.at.Add(-r.dur("apply") - r.dur("compile") - r.dur("snapshot") - r.dur("waited"))
			// The agent's clock prints milliseconds: a program that
			// took the update in the same millisecond counts.
			if received.Before(start.Add(-time.Millisecond)) {
				prog = nil // a program of something earlier
				continue
			}
			return r, prog, nil
		case <-deadline:
			return phaseRecord{}, nil, fmt.Errorf("no program within %s", timeout)
		}
	}
}

// agentLines reads a real agent's stderr (text slog, --log-level=debug;
// GODEBUG=gctrace=1), sending the two debug lines to recs, stamped with
// their arrival, and the start of each garbage collection to gcs.
type agentLines struct {
	w    *io.PipeWriter
	recs chan phaseRecord
	gcs  chan time.Time
	tail *ringLog
}

var (
	slogAttr = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S+)`)
	gcLine   = regexp.MustCompile(`^gc \d+ @`)
)

func newAgentLines() *agentLines {
	r, w := io.Pipe()
	a := &agentLines{w: w, recs: make(chan phaseRecord, 256), gcs: make(chan time.Time, 4096), tail: &ringLog{}}
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line, now := sc.Text(), time.Now()
			a.tail.add(line)
			if gcLine.MatchString(line) {
				select {
				case a.gcs <- now:
				default:
				}
				continue
			}
			if !strings.Contains(line, `msg="policy programmed"`) && !strings.Contains(line, "msg=programmed") {
				continue
			}
			rec := phaseRecord{at: now, attrs: map[string]string{}}
			for _, m := range slogAttr.FindAllStringSubmatch(line, -1) {
				rec.attrs[m[1]] = strings.Trim(m[2], `"`)
			}
			rec.msg = rec.attrs["msg"]
			select {
			case a.recs <- rec:
			default:
			}
		}
		io.Copy(io.Discard, r)
	}()
	return a
}

// ringLog keeps the last lines of a process's output for failures.
type ringLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *ringLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
	if len(l.lines) > 400 {
		l.lines = slices.Clone(l.lines[200:])
	}
}

func (l *ringLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// summarize is the breakdown of the median change and the mean of the
// slowest 2%, phase by phase, and a line with each of the slowest.
func summarize(name string, ps []phases) (summary, slowest string) {
	if len(ps) == 0 {
		return "", ""
	}
	sorted := slices.Clone(ps)
	slices.SortFunc(sorted, func(a, b phases) int { return int(a.total - b.total) })
	mid := sorted[len(sorted)/2]
	slow := sorted[len(sorted)-max(1, len(sorted)/50):]
	row := func(what string, f func(p phases) time.Duration) string {
		var sum time.Duration
		for _, p := range slow {
			sum += f(p)
		}
		return fmt.Sprintf("%s %s / %s", what, f(mid).Round(100*time.Microsecond), (sum / time.Duration(len(slow))).Round(100*time.Microsecond))
	}
	gcs, parallel := 0, 0
	for _, p := range slow {
		gcs += p.gcs
		if p.parallel {
			parallel++
		}
	}
	var each []string
	for _, p := range slow {
		each = append(each, fmt.Sprintf("[total %s: arrive %s, waited %s, snapshot %s, compile %s, read %s, ipset %s (parallel %v), tables %s (restore %s), %d GCs]",
			p.total.Round(time.Millisecond), p.arrive.Round(time.Millisecond), p.waited.Round(time.Millisecond), p.snapshot.Round(time.Millisecond),
			p.compile.Round(time.Millisecond), p.read.Round(time.Millisecond), p.ipset.Round(time.Millisecond), p.parallel,
			p.tables.Round(time.Millisecond), p.restore.Round(time.Millisecond), p.gcs))
	}
	summary = fmt.Sprintf("%s, where a change's time goes, median change / mean of the slowest %d: %s; %s; %s; %s; %s; %s; %s; %s; %s; %s; GCs during the change %d / %.1f",
		name, len(slow),
		row("total", func(p phases) time.Duration { return p.total }),
		row("etcd+watch to actor", func(p phases) time.Duration { return p.arrive }),
		row("actor wait", func(p phases) time.Duration { return p.waited }),
		row("snapshot", func(p phases) time.Duration { return p.snapshot }),
		row("compile", func(p phases) time.Duration { return p.compile }),
		row("apply", func(p phases) time.Duration { return p.apply }),
		row("kernel read", func(p phases) time.Duration { return p.read }),
		row("ipset restore", func(p phases) time.Duration { return p.ipset }),
		row("hash+diff+iptables-restore", func(p phases) time.Duration { return p.tables }),
		row("iptables-restore", func(p phases) time.Duration { return p.restore }),
		mid.gcs, float64(gcs)/float64(len(slow)))
	return summary, fmt.Sprintf("%s, the slowest: %s", name, strings.Join(each, " "))
}
