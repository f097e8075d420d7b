package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// listenPort is where every pod's listener answers.
const listenPort = 8080

// probeTimeout bounds one connection attempt: policy drops packets, so a
// denied probe costs this long (all probes of a matrix run at once).
const probeTimeout = 700 * time.Millisecond

// serve answers every TCP connection with name and a newline.
func serve(ctx context.Context, addr, name string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	defer l.Close()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept: %w", err)
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(2 * time.Second))
			io.WriteString(c, name+"\n")
		}()
	}
}

// probe connects from inside the pod namespace at nsPath to addr and
// reports whether the pod named want answered.
func probe(nsPath, addr, want string) bool {
	ok := false
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		c, err := net.DialTimeout("tcp", addr, probeTimeout)
		if err != nil {
			return nil
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(probeTimeout))
		line, _ := bufio.NewReader(c).ReadString('\n')
		ok = strings.TrimSpace(line) == want
		return nil
	})
	return err == nil && ok
}

// matrix is reachability between pods: m[from][to].
type matrix [][]bool

// measure probes every ordered pair of distinct pods at once.
func measure(pods []*pod) matrix {
	m := make(matrix, len(pods))
	var wg sync.WaitGroup
	for i := range pods {
		m[i] = make([]bool, len(pods))
		for j := range pods {
			if i == j {
				m[i][j] = true
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				m[i][j] = probe(pods[i].nsPath(), net.JoinHostPort(pods[j].ip, fmt.Sprint(listenPort)), pods[j].name())
			}()
		}
	}
	wg.Wait()
	return m
}

func (m matrix) equal(o matrix) bool {
	for i := range m {
		for j := range m[i] {
			if m[i][j] != o[i][j] {
				return false
			}
		}
	}
	return true
}

// awaitMatrix measures until the matrix is want or the time is up, and
// returns the last measurement: policy and routes take a moment to reach
// every node's kernel.
func awaitMatrix(ctx context.Context, pods []*pod, want matrix, timeout time.Duration) matrix {
	deadline := time.Now().Add(timeout)
	for {
		m := measure(pods)
		if m.equal(want) || time.Now().After(deadline) || ctx.Err() != nil {
			return m
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// render writes m as a table, marking with '*' the cells that differ from
// prev (nil: nothing marked).
func (m matrix) render(w io.Writer, pods []*pod, prev matrix) {
	fmt.Fprintf(w, "    %-18s", "from \\ to")
	for _, p := range pods {
		fmt.Fprintf(w, " %-5s", p.short())
	}
	fmt.Fprintln(w)
	for i, p := range pods {
		fmt.Fprintf(w, "    %-18s", p.short()+" "+p.name())
		for j := range pods {
			cell := "ok"
			switch {
			case i == j:
				cell = "."
			case !m[i][j]:
				cell = "--"
			}
			if prev != nil && i != j && prev[i][j] != m[i][j] {
				cell += "*"
			}
			fmt.Fprintf(w, " %-5s", cell)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "    ok = TCP connection answered by that pod, -- = no connection, * = changed by this step")
}

// expected computes the matrix the demo's story predicts: allowed(from, to).
func expected(pods []*pod, allowed func(from, to *pod) bool) matrix {
	m := make(matrix, len(pods))
	for i := range pods {
		m[i] = make([]bool, len(pods))
		for j := range pods {
			m[i][j] = i == j || allowed(pods[i], pods[j])
		}
	}
	return m
}
