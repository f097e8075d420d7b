package controllers

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/projectcalico/calico-node/internal/testkit/goldentest"
)

// TestIPAMMetricNames: the ipam_* metrics the controllers serve, each
// with its type, labels and help, are those of
// testdata/ipam-metrics.golden: Calico kube-controllers' names, which its
// dashboards read. A metric renamed, retyped or relabelled fails here,
// and docs/metrics.md lists each.
func TestIPAMMetricNames(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := newIPAMMetrics()
	reg.MustRegister(m.collectors()...)
	// A vector is only gathered once it has a child.
	m.poolSize.WithLabelValues("p")
	for _, v := range []*prometheus.GaugeVec{m.inUse, m.borrowed, m.blocks, m.gcCandidates} {
		v.WithLabelValues("p", "n")
	}
	m.gcReclamations.WithLabelValues("p", "n")
	for _, v := range []*prometheus.GaugeVec{m.perNodeAllocs, m.perNodeBorrowed, m.perNodeBlocks} {
		v.WithLabelValues("n")
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range fams {
		var labels []string
		for _, l := range f.Metric[0].Label {
			labels = append(labels, l.GetName())
		}
		slices.Sort(labels)
		fmt.Fprintf(&b, "%s %s {%s} %s\n", f.GetName(), strings.ToLower(f.GetType().String()), strings.Join(labels, ","), f.GetHelp())
	}
	if len(fams) != len(m.collectors()) {
		t.Errorf("%d metrics gathered of %d collectors", len(fams), len(m.collectors()))
	}
	goldentest.Check(t, "testdata/ipam-metrics.golden", []byte(b.String()))

	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if !strings.Contains(string(doc), "`"+f.GetName()+"{") && !strings.Contains(string(doc), "`"+f.GetName()+"`") {
			t.Errorf("docs/metrics.md does not list %s", f.GetName())
		}
	}
}
