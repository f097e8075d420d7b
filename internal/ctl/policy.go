package ctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/urfave/cli/v2"
	"sigs.k8s.io/yaml"

	"github.com/projectcalico/calico-node/agent"
	"github.com/projectcalico/calico-node/agent/felixenv"
	"github.com/projectcalico/calico-node/agent/xtables"
	"github.com/projectcalico/calico-node/confwatch"
	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/node/startup"
	"github.com/projectcalico/calico-node/internal/policy"
	"github.com/projectcalico/calico-node/internal/policy/explain"
)

// explainFlags are the flags of `policy explain`; like ipamFlags, the
// policy command knows them all (hidden), since NormalizeArgs puts them
// before the subcommand.
func explainFlags(hidden bool) map[string]cli.Flag {
	return map[string]cli.Flag{
		"from":        &cli.StringFlag{Name: "from", Usage: "the source: namespace/pod, hostendpoint/NAME, node/NAME or an IP address", Hidden: hidden},
		"to":          &cli.StringFlag{Name: "to", Usage: "the destination, named the same ways", Hidden: hidden},
		"protocol":    &cli.StringFlag{Name: "protocol", Value: "TCP", Usage: "TCP, UDP, SCTP, UDPLite, ICMP, ICMPv6 or a protocol number", Hidden: hidden},
		"port":        &cli.UintFlag{Name: "port", Usage: "the destination port", Hidden: hidden},
		"source-port": &cli.UintFlag{Name: "source-port", Value: 40000, Usage: "the source port", Hidden: hidden},
		"icmp-type":   &cli.UintFlag{Name: "icmp-type", Usage: "the ICMP type (default: echo request)", Hidden: hidden},
		"icmp-code":   &cli.UintFlag{Name: "icmp-code", Hidden: hidden},
		"node":        &cli.StringFlag{Name: "node", Usage: "explain only what this node does (required for a packet between two addresses no endpoint has: the node that routes it)", Hidden: hidden},
		"uplink":      &cli.StringFlag{Name: "uplink", Value: "eth0", Usage: "the interface nodes send and receive other nodes' and the outside's traffic by", Hidden: hidden},
		"output":      &cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "text", Usage: "text, yaml or json", Hidden: hidden},
		"live":        &cli.BoolFlag{Name: "live", Usage: "on a node: add the kernel's packet counters of the rules (and the node's interfaces, as the agent reads them)", Hidden: hidden},
	}
}

// policyCommand is `calicoctl policy`.
func policyCommand() *cli.Command {
	f := explainFlags(false)
	return &cli.Command{
		Name:            "policy",
		Usage:           "explain what policy does to a packet",
		Flags:           hiddenFlags(explainFlags),
		HideHelpCommand: true,
		Subcommands: []*cli.Command{{
			Name: "explain",
			Usage: "the verdict on a packet and the way to it: the source's egress, then the destination's ingress, tier by tier, " +
				"policy by policy, rule by rule, each step with the iptables rule that enforces it on its node",
			Flags:  pickFlags(f, "from", "to", "protocol", "port", "source-port", "icmp-type", "icmp-code", "node", "uplink", "output", "live"),
			Action: withSession(cmdExplain),
		}},
	}
}

// cluster is the datastore's resources as the policy actors read them,
// and each node's compiler input made from them.
type cluster struct {
	objs map[confwatch.Key]api.Object
	// env are the FELIX_* settings of this process's environment: inside
	// the calico-node container, the agent's own.
	env *api.FelixConfigurationSpec
	// local, when set, completes the snapshot of the node this runs on
	// as the agent does (its interfaces, whether IPv6 is programmed).
	local     string
	completed func(*policy.Snapshot) error
}

func (s *session) loadCluster() (*cluster, error) {
	objs, err := confwatch.Load(s.ctx, s.store, agent.PolicyKinds()...)
	if err != nil {
		return nil, err
	}
	env, err := felixenv.Parse(os.Environ())
	if err != nil {
		return nil, err
	}
	return &cluster{objs: objs, env: env.Spec}, nil
}

// snapshots is the explain.SnapshotFunc of the cluster.
func (c *cluster) snapshots(node string) (*policy.Snapshot, error) {
	s := agent.PolicySnapshot(c.objs, node, c.env)
	if node != "" && node == c.local && c.completed != nil {
		if err := c.completed(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func cmdExplain(s *session) error {
	c := s.c
	str := func(name string) string { cc, _ := ipamFlag(c, name); return cc.String(name) }
	num := func(name string) uint { cc, _ := ipamFlag(c, name); return cc.Uint(name) }
	live := ipamBool(c, "live")
	out := str("output")
	switch out {
	case "text", "yaml", "json":
	default:
		return fmt.Errorf("--output %q: want text, yaml or json", out)
	}
	if str("from") == "" || str("to") == "" {
		return errors.New("give the packet's ends: --from and --to (namespace/pod, hostendpoint/NAME, node/NAME or an IP address)")
	}
	proto, err := explain.ProtocolNumber(str("protocol"))
	if err != nil {
		return err
	}
	if num("port") > 65535 || num("source-port") > 65535 || num("icmp-type") > 255 || num("icmp-code") > 255 {
		return errors.New("--port and --source-port are 0-65535, --icmp-type and --icmp-code 0-255")
	}
	cl, err := s.loadCluster()
	if err != nil {
		return err
	}
	var counters *liveCounters
	if live {
		if cl.local, err = localNodeName(str("node")); err != nil {
			return err
		}
		counters, err = newLiveCounters(s, cl.env)
		if err != nil {
			return err
		}
		cl.completed = func(snap *policy.Snapshot) error {
			return agent.CompleteSnapshot(snap, agent.NetlinkHostInterfaces, counters.ipv6, counters.randomFully)
		}
	}
	any, err := cl.snapshots("")
	if err != nil {
		return err
	}
	from, err := explain.Resolve(any, str("from"))
	if err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	to, err := explain.Resolve(any, str("to"))
	if err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	req := explain.Request{From: from, To: to, Protocol: proto, DstPort: uint16(num("port")), SrcPort: uint16(num("source-port")),
		ICMPType: uint8(num("icmp-type")), ICMPCode: uint8(num("icmp-code")), Node: str("node"), Uplink: str("uplink")}
	if (proto == 1 || proto == 58) && !isSet(c, "icmp-type") {
		req.ICMPType = map[bool]uint8{false: 8, true: 128}[proto == 58]
	}
	ex, err := explain.Explain(req, cl.snapshots)
	if errors.Is(err, explain.ErrNoNode) {
		return fmt.Errorf("%w (--node)", err)
	}
	if err != nil {
		return err
	}
	var notes []string
	if counters != nil {
		if notes, err = counters.fill(ex, cl.local); err != nil {
			return err
		}
	}
	switch out {
	case "yaml", "json":
		doc := struct {
			*explain.Explanation
			Notes []string `json:"notes,omitempty"`
		}{ex, notes}
		var data []byte
		if out == "json" {
			data, err = json.MarshalIndent(doc, "", "  ")
			data = append(data, '\n')
		} else {
			data, err = yaml.Marshal(doc)
		}
		if err != nil {
			return err
		}
		_, err = s.out.Write(data)
		return err
	}
	if err := ex.WriteText(s.out); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintf(s.out, "note: %s\n", n)
	}
	return nil
}

func isSet(c *cli.Context, name string) bool {
	_, ok := ipamFlag(c, name)
	return ok
}

// localNodeName is this host's node name, as calico-node run finds it:
// --node, NODENAME, the name the agent wrote in /var/lib/calico/nodename,
// HOSTNAME, the hostname.
func localNodeName(flag string) (string, error) {
	n := flag
	if n == "" {
		n = os.Getenv("NODENAME")
	}
	if n == "" {
		if data, err := os.ReadFile("/var/lib/calico/nodename"); err == nil {
			n = strings.TrimSpace(string(data))
		}
	}
	return startup.NodeName(n, os.Getenv)
}

// liveCounters reads this host's iptables counters, in the flavour the
// agent programs (FELIX_IPTABLESBACKEND, else what the host uses).
type liveCounters struct {
	s      *session
	b4, b6 xtables.Backend
	// ipv6 and randomFully are what the agent finds on this host.
	ipv6, randomFully bool
}

func newLiveCounters(s *session, env *api.FelixConfigurationSpec) (*liveCounters, error) {
	want := ""
	if env != nil && env.IptablesBackend != nil {
		switch *env.IptablesBackend {
		case api.IptablesBackendLegacy:
			want = "legacy"
		case api.IptablesBackendNFTables:
			want = "nft"
		}
	}
	mode, err := xtables.DetectMode(s.ctx, xtables.ExecRunner{}, want)
	if err != nil {
		return nil, fmt.Errorf("--live: %w", err)
	}
	l := &liveCounters{s: s, b4: xtables.BackendFor(mode, 4), b6: xtables.BackendFor(mode, 6)}
	_, err = exec.LookPath(l.b6.Save)
	l.ipv6 = err == nil
	release, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	l.randomFully = xtables.RandomFully(s.ctx, xtables.ExecRunner{}, l.b4, string(release))
	return l, nil
}

// fill sets the counters of every rule the explanation cites on node
// and returns notes on what it could not find.
func (l *liveCounters) fill(ex *explain.Explanation, node string) ([]string, error) {
	v6 := strings.Contains(ex.Packet.Source, ":")
	b := l.b4
	if v6 {
		b = l.b6
	}
	tables := map[string]map[string]xtables.Counter{}
	var notes []string
	found := false
	for _, hops := range [][]explain.Hop{ex.Hops, replyHops(ex)} {
		for h := range hops {
			if hops[h].Node != node {
				continue
			}
			found = true
			for s := range hops[h].Sections {
				sec := &hops[h].Sections[s]
				for st := range sec.Steps {
					for i := range sec.Steps[st].Rules {
						r := &sec.Steps[st].Rules[i]
						cs, ok := tables[r.Table]
						if !ok {
							var err error
							if cs, err = xtables.ReadCounters(l.s.ctx, xtables.ExecRunner{}, b, r.Table); err != nil {
								return nil, err
							}
							tables[r.Table] = cs
						}
						c, ok := cs[strings.TrimPrefix(r.Hash, policy.HashPrefix)]
						if !ok {
							notes = append(notes, fmt.Sprintf("%s %s #%d (%s) is not in this host's kernel: the agent has not programmed what the datastore says (yet), or this is not node %s",
								r.Table, r.Chain, r.Number, r.Hash, node))
							continue
						}
						r.Packets, r.Bytes = &c.Packets, &c.Bytes
					}
				}
			}
		}
	}
	if !found {
		notes = append(notes, fmt.Sprintf("the packet does not cross this node (%s): no counters", node))
	}
	return notes, nil
}

func replyHops(ex *explain.Explanation) []explain.Hop {
	if ex.Reply == nil {
		return nil
	}
	return ex.Reply.Hops
}
