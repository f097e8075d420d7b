package ctl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"text/template"

	"sigs.k8s.io/yaml"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// objectList is what a listing is to calicoctl: one <Kind>List holding
// every object. Its Go field names are those of Calico's list types, so
// `-o go-template` templates written for calicoctl ({{range .Items}})
// work unchanged.
type objectList struct {
	api.TypeMeta `json:",inline"`
	Items        []api.Object `json:"items"`
}

// output is how `get` prints, parsed from -o.
type output struct {
	// format is ps, wide, yaml, json, name, go-template,
	// go-template-file or custom-columns.
	format string
	// arg is the template, template file or column list.
	arg string
}

// parseOutput reads -o as calicoctl does: a name, or key=value for the
// template and column forms.
func parseOutput(o string) (output, error) {
	switch o {
	case "ps", "wide", "yaml", "yml", "json", "name":
		if o == "yml" {
			o = "yaml"
		}
		return output{format: o}, nil
	}
	key, val, _ := strings.Cut(o, "=")
	switch key {
	case "go-template":
		if val == "" {
			return output{}, errors.New("need to specify a template")
		}
	case "go-template-file":
		if val == "" {
			return output{}, errors.New("need to specify a template file")
		}
	case "custom-columns":
		if val == "" {
			return output{}, errors.New("need to specify at least one column")
		}
	default:
		return output{}, fmt.Errorf("unrecognized output format '%s' (use ps, wide, yaml, json, name, custom-columns=..., go-template=... or go-template-file=...)", o)
	}
	return output{format: key, arg: val}, nil
}

// printer renders `get` results. A result is either an *objectList (a
// listing) or one api.Object (each name asked for), as calicoctl's results
// are.
type printer struct {
	w   io.Writer
	out output
	// printNamespace adds the NAMESPACE column for namespaced kinds
	// (calicoctl: with -A or -n).
	printNamespace bool
	// asNumber is the cluster's default AS number, for the Node ASN column
	// of nodes without their own.
	asNumber func() string
	asn      string // asNumber's answer, once read
}

func (p *printer) print(results []any) error {
	for _, r := range results {
		setAPIVersion(r)
	}
	switch p.out.format {
	case "yaml", "json":
		return p.printDocument(results)
	case "name":
		for _, r := range results {
			for _, o := range objectsOf(r) {
				fmt.Fprintf(p.w, "%s/%s\n", strings.ToLower(o.Type().Kind), o.Meta().Name)
			}
		}
		return nil
	case "go-template", "go-template-file":
		text := p.out.arg
		if p.out.format == "go-template-file" {
			data, err := os.ReadFile(p.out.arg)
			if err != nil {
				return err
			}
			text = string(data)
		}
		tmpl, err := template.New("get").Funcs(p.funcs()).Parse(text)
		if err != nil {
			return err
		}
		return tmpl.Execute(p.w, results)
	default:
		for _, r := range results {
			if err := p.printTable(r); err != nil {
				return err
			}
		}
		return nil
	}
}

func setAPIVersion(r any) {
	if l, ok := r.(*objectList); ok {
		l.APIVersion = api.GroupVersion
	}
	for _, o := range objectsOf(r) {
		o.Type().APIVersion = api.GroupVersion
	}
}

func objectsOf(r any) []api.Object {
	switch v := r.(type) {
	case *objectList:
		return v.Items
	case api.Object:
		return []api.Object{v}
	}
	return nil
}

// printDocument prints one result as itself and several as a
// <Kind>List holding them all.
func (p *printer) printDocument(results []any) error {
	var v any
	switch {
	case len(results) == 1:
		v = results[0]
		if l, ok := v.(*objectList); ok && l.Items == nil {
			l.Items = []api.Object{}
		}
	default:
		l := &objectList{Items: []api.Object{}}
		for _, r := range results {
			l.Items = append(l.Items, objectsOf(r)...)
		}
		if len(l.Items) > 0 {
			l.Kind = l.Items[0].Type().Kind + "List"
		}
		l.APIVersion = api.GroupVersion
		v = l
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	if p.out.format == "yaml" {
		if data, err = yaml.JSONToYAML(data); err != nil {
			return fmt.Errorf("encode output: %w", err)
		}
		_, err = p.w.Write(data)
		return err
	}
	_, err = fmt.Fprintf(p.w, "%s\n", data)
	return err
}

// funcs are the template functions calicoctl offers.
func (p *printer) funcs() template.FuncMap {
	return template.FuncMap{
		"join":            join,
		"joinAndTruncate": joinAndTruncate,
		"add":             func(a, b int) int { return a + b },
		"config": func(name string) string {
			if strings.ToLower(name) != "asnumber" || p.asNumber == nil {
				return "unknown"
			}
			// Read once per command, as calicoctl does.
			if p.asn == "" {
				p.asn = p.asNumber()
			}
			return p.asn
		},
	}
}

// printTable prints one result as a table (one row per object, headings
// first) and then an empty line, as calicoctl does.
func (p *printer) printTable(r any) error {
	kind := ""
	if l, ok := r.(*objectList); ok {
		kind = strings.TrimSuffix(l.Kind, "List")
	} else if o, ok := r.(api.Object); ok {
		kind = o.Type().Kind
	}
	spec := tables[kind]
	if spec.cols == nil {
		spec = tableSpec{ps: []string{"NAME"}, wide: []string{"NAME"}, cols: map[string]string{"NAME": "{{.ObjectMeta.Name}}"}}
	}
	headings := spec.ps
	switch p.out.format {
	case "wide":
		headings = spec.wide
	case "custom-columns":
		headings = strings.Split(p.out.arg, ",")
	}
	if _, ok := spec.cols["NAMESPACE"]; ok && p.printNamespace && p.out.format != "custom-columns" {
		headings = append([]string{"NAMESPACE"}, headings...)
	}
	var b strings.Builder
	for _, h := range headings {
		b.WriteString(h + "\t")
	}
	b.WriteString("\n")
	_, isList := r.(*objectList)
	if isList {
		b.WriteString("{{range .Items}}")
	}
	for _, h := range headings {
		col, ok := spec.cols[h]
		if !ok {
			valid := make([]string, 0, len(spec.cols))
			for k := range spec.cols {
				valid = append(valid, k)
			}
			sort.Strings(valid)
			return fmt.Errorf("unknown heading %s, valid values are: %s", h, strings.Join(valid, ", "))
		}
		b.WriteString(col + "\t")
	}
	b.WriteString("\n")
	if isList {
		b.WriteString("{{end}}")
	}
	tmpl, err := template.New("table").Funcs(p.funcs()).Parse(b.String())
	if err != nil {
		return fmt.Errorf("table of %s: %w", kind, err)
	}
	tw := tabwriter.NewWriter(p.w, 5, 1, 3, ' ', 0)
	if err := tmpl.Execute(tw, r); err != nil {
		return fmt.Errorf("table of %s: %w", kind, err)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintln(p.w)
	return err
}

// tableSpec is one kind's table: default and wide headings, and the
// template of every heading (calicoctl's resourcemgr, v3.31).
type tableSpec struct {
	ps, wide []string
	cols     map[string]string
}

const nameCol = "{{.ObjectMeta.Name}}"

var tables = map[string]tableSpec{
	"BGPConfiguration": {
		ps:   []string{"NAME", "LOGSEVERITY", "MESHENABLED", "ASNUMBER"},
		wide: []string{"NAME", "LOGSEVERITY", "MESHENABLED", "ASNUMBER"},
		cols: map[string]string{
			"NAME":        nameCol,
			"LOGSEVERITY": "{{.Spec.LogSeverityScreen}}",
			"MESHENABLED": "{{if .Spec.NodeToNodeMeshEnabled}}{{.Spec.NodeToNodeMeshEnabled}}{{ else }}-{{ end }}",
			"ASNUMBER":    "{{if .Spec.ASNumber}}{{.Spec.ASNumber}}{{ else }}-{{ end }}",
		},
	},
	"BGPPeer": {
		ps:   []string{"NAME", "PEERIP", "NODE", "ASN"},
		wide: []string{"NAME", "PEERIP", "NODE", "ASN"},
		cols: map[string]string{
			"NAME":   nameCol,
			"PEERIP": "{{.Spec.PeerIP}}",
			"NODE":   "{{ if eq .Spec.Node `` }}{{ if eq .Spec.NodeSelector `` }}(global){{ else }}{{.Spec.NodeSelector}}{{ end }}{{ else }}{{.Spec.Node}}{{ end }}",
			"ASN":    "{{.Spec.ASNumber}}",
		},
	},
	"ClusterInformation": {
		ps:   []string{"NAME", "CLUSTERGUID", "CLUSTERTYPE", "CALICOVERSION", "DATASTOREREADY"},
		wide: []string{"NAME", "CLUSTERGUID", "CLUSTERTYPE", "CALICOVERSION", "DATASTOREREADY"},
		cols: map[string]string{
			"NAME":           nameCol,
			"CLUSTERGUID":    "{{.Spec.ClusterGUID}}",
			"CLUSTERTYPE":    "{{.Spec.ClusterType}}",
			"CALICOVERSION":  "{{.Spec.CalicoVersion}}",
			"DATASTOREREADY": "{{.Spec.DatastoreReady}}",
		},
	},
	"FelixConfiguration":           {ps: []string{"NAME"}, wide: []string{"NAME"}, cols: map[string]string{"NAME": nameCol}},
	"KubeControllersConfiguration": {ps: []string{"NAME"}, wide: []string{"NAME"}, cols: map[string]string{"NAME": nameCol}},
	"GlobalNetworkPolicy": {
		ps:   []string{"NAME", "TIER"},
		wide: []string{"NAME", "TIER", "ORDER", "SELECTOR"},
		cols: map[string]string{"NAME": nameCol, "ORDER": "{{.Spec.Order}}", "SELECTOR": "{{.Spec.Selector}}", "TIER": "{{.Spec.Tier}}"},
	},
	"NetworkPolicy": {
		ps:   []string{"NAME", "TIER"},
		wide: []string{"NAME", "TIER", "ORDER", "SELECTOR"},
		cols: map[string]string{"NAME": nameCol, "NAMESPACE": "{{.ObjectMeta.Namespace}}", "ORDER": "{{.Spec.Order}}",
			"SELECTOR": "{{.Spec.Selector}}", "TIER": "{{.Spec.Tier}}"},
	},
	"GlobalNetworkSet": {
		ps:   []string{"NAME"},
		wide: []string{"NAME", "NETS"},
		cols: map[string]string{"NAME": nameCol, "NETS": "{{joinAndTruncate .Spec.Nets \",\" 80}}"},
	},
	"NetworkSet": {
		ps:   []string{"NAME"},
		wide: []string{"NAME", "NETS"},
		cols: map[string]string{"NAME": nameCol, "NAMESPACE": "{{.ObjectMeta.Namespace}}", "NETS": "{{joinAndTruncate .Spec.Nets \",\" 80}}"},
	},
	"HostEndpoint": {
		ps:   []string{"NAME", "NODE"},
		wide: []string{"NAME", "NODE", "INTERFACE", "IPS", "PROFILES"},
		cols: map[string]string{"NAME": nameCol, "NODE": "{{.Spec.Node}}", "INTERFACE": "{{.Spec.InterfaceName}}",
			"IPS": "{{join .Spec.ExpectedIPs \",\"}}", "PROFILES": "{{join .Spec.Profiles \",\"}}"},
	},
	"IPPool": {
		ps:   []string{"NAME", "CIDR", "SELECTOR"},
		wide: []string{"NAME", "CIDR", "NAT", "IPIPMODE", "VXLANMODE", "DISABLED", "DISABLEBGPEXPORT", "SELECTOR", "ASSIGNMENTMODE"},
		cols: map[string]string{
			"NAME":             nameCol,
			"CIDR":             "{{.Spec.CIDR}}",
			"NAT":              "{{.Spec.NATOutgoing}}",
			"IPIPMODE":         "{{if .Spec.IPIPMode}}{{.Spec.IPIPMode}}{{else}}Never{{end}}",
			"VXLANMODE":        "{{if .Spec.VXLANMode}}{{.Spec.VXLANMode}}{{else}}Never{{end}}",
			"DISABLED":         "{{.Spec.Disabled}}",
			"DISABLEBGPEXPORT": "{{.Spec.DisableBGPExport}}",
			"SELECTOR":         "{{.Spec.NodeSelector}}",
			"ASSIGNMENTMODE":   "{{.Spec.AssignmentMode}}",
		},
	},
	"IPReservation": {
		ps:   []string{"NAME"},
		wide: []string{"NAME", "CIDRS"},
		cols: map[string]string{"NAME": nameCol, "CIDRS": "{{joinAndTruncate .Spec.ReservedCIDRs \",\" 80}}"},
	},
	"Node": {
		ps:   []string{"NAME"},
		wide: []string{"NAME", "ASN", "IPV4", "IPV6"},
		cols: map[string]string{
			"NAME": nameCol,
			"ASN":  "{{if .Spec.BGP}}{{if .Spec.BGP.ASNumber}}{{.Spec.BGP.ASNumber}}{{else}}({{config \"asnumber\"}}){{end}}{{end}}",
			"IPV4": "{{if .Spec.BGP}}{{if .Spec.BGP.IPv4Address}}{{.Spec.BGP.IPv4Address}}{{end}}{{end}}",
			"IPV6": "{{if .Spec.BGP}}{{if .Spec.BGP.IPv6Address}}{{.Spec.BGP.IPv6Address}}{{end}}{{end}}",
		},
	},
	"Profile": {
		ps:   []string{"NAME"},
		wide: []string{"NAME", "LABELS"},
		cols: map[string]string{"NAME": nameCol, "LABELS": "{{join .Spec.LabelsToApply \",\"}}"},
	},
	// calicoctl v3.31's NUMEXPORT/NUMIMPORT columns name fields BGPFilter
	// does not have (its template fails); the counts are of all families.
	"BGPFilter": {
		ps:   []string{"NAME", "NUMEXPORT", "NUMIMPORT"},
		wide: []string{"NAME", "NUMEXPORT", "NUMIMPORT"},
		cols: map[string]string{
			"NAME":      nameCol,
			"NUMEXPORT": "{{ add (len .Spec.ExportV4) (len .Spec.ExportV6) }}",
			"NUMIMPORT": "{{ add (len .Spec.ImportV4) (len .Spec.ImportV6) }}",
		},
	},
	"Tier": {
		ps:   []string{"NAME", "ORDER"},
		wide: []string{"NAME", "ORDER"},
		cols: map[string]string{"NAME": nameCol, "ORDER": "{{.Spec.Order}}"},
	},
	"WorkloadEndpoint": {
		ps:   []string{"WORKLOAD", "NODE", "NETWORKS", "INTERFACE"},
		wide: []string{"NAME", "WORKLOAD", "NODE", "NETWORKS", "INTERFACE", "PROFILES", "NATS"},
		cols: map[string]string{
			"NAME":         nameCol,
			"NAMESPACE":    "{{.ObjectMeta.Namespace}}",
			"NODE":         "{{.Spec.Node}}",
			"ORCHESTRATOR": "{{.Spec.Orchestrator}}",
			"WORKLOAD":     "{{if .Spec.Workload}}{{.Spec.Workload}}{{else}}{{.Spec.Pod}}{{end}}",
			"NETWORKS":     "{{join .Spec.IPNetworks \",\"}}",
			"NATS":         "{{join .Spec.IPNATs \",\"}}",
			"PROFILES":     "{{join .Spec.Profiles \",\"}}",
			"INTERFACE":    "{{.Spec.InterfaceName}}",
		},
	},
}

// join is strings.Join for any slice (or map, as sorted key=value pairs).
func join(items any, sep string) string { return joinAndTruncate(items, sep, 0) }

// joinAndTruncate is join, cut to maxLen (with "...") when maxLen > 0.
func joinAndTruncate(items any, sep string, maxLen int) string {
	if items == nil {
		return ""
	}
	v := reflect.ValueOf(items)
	if v.Kind() == reflect.Map {
		pairs := make([]string, 0, v.Len())
		for _, k := range v.MapKeys() {
			pairs = append(pairs, fmt.Sprintf("%v=%v", k.Interface(), v.MapIndex(k).Interface()))
		}
		slices.Sort(pairs)
		v = reflect.ValueOf(pairs)
	}
	if v.Kind() != reflect.Slice {
		v = reflect.ValueOf([]any{items})
	}
	var buf bytes.Buffer
	for i := range v.Len() {
		if i > 0 {
			buf.WriteString(sep)
		}
		fmt.Fprint(&buf, v.Index(i).Interface())
		if maxLen > 0 && buf.Len() > maxLen {
			buf.Truncate(maxLen - len("..."))
			buf.WriteString("...")
			break
		}
	}
	return buf.String()
}

// clientView adds to a policy what Calico's clientv3 adds on every read,
// so that calicoctl shows (and a get, edit, apply round trip writes back)
// what Calico's does: the projectcalico.org/tier label ("default" when
// there is none) and spec.tier from the name when it is empty.
func clientView(obj api.Object) {
	var tier *string
	switch p := obj.(type) {
	case *api.NetworkPolicy:
		tier = &p.Spec.Tier
	case *api.GlobalNetworkPolicy:
		tier = &p.Spec.Tier
	default:
		return
	}
	m := obj.Meta()
	if _, ok := m.Labels[api.LabelTier]; !ok {
		m.Labels = maps.Clone(m.Labels)
		if m.Labels == nil {
			m.Labels = map[string]string{}
		}
		m.Labels[api.LabelTier] = api.DefaultTierName
	}
	if *tier == "" {
		*tier = datastore.TierFromPolicyName(m.Name)
	}
}
