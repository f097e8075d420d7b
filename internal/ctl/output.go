package ctl

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// printObjects renders objects as calicoctl does: a single named object on
// its own, several as a <Kind>List document, or a table.
func printObjects(w io.Writer, kind string, objs []api.Object, format string, single, withNS bool) error {
	for _, o := range objs {
		t := o.Type()
		t.APIVersion = api.GroupVersion
	}
	switch format {
	case "yaml", "json":
		var v any
		if single && len(objs) == 1 {
			v = objs[0]
		} else {
			items := objs
			if items == nil {
				items = []api.Object{}
			}
			v = map[string]any{
				"apiVersion": api.GroupVersion,
				"kind":       kind + "List",
				"items":      items,
			}
		}
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("encode output: %w", err)
		}
		if format == "yaml" {
			if data, err = yaml.JSONToYAML(data); err != nil {
				return fmt.Errorf("encode output: %w", err)
			}
			_, err = w.Write(data)
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", data)
		return err
	case "name":
		for _, o := range objs {
			fmt.Fprintf(w, "%s/%s\n", strings.ToLower(o.Type().Kind), o.Meta().Name)
		}
		return nil
	default:
		return printTable(w, kind, objs, format == "wide", withNS)
	}
}

// column is one table column: a header and a JSON path into the object.
type column struct {
	header string
	path   string
}

// tableColumns follows calicoctl's ps / wide columns per kind.
func tableColumns(kind string, wide bool) []column {
	name := column{"NAME", "metadata.name"}
	switch kind {
	case "IPPool":
		if wide {
			return []column{name, {"CIDR", "spec.cidr"}, {"NAT", "spec.natOutgoing"}, {"IPIPMODE", "spec.ipipMode"}, {"VXLANMODE", "spec.vxlanMode"}, {"DISABLED", "spec.disabled"}, {"DISABLEBGPEXPORT", "spec.disableBGPExport"}, {"SELECTOR", "spec.nodeSelector"}}
		}
		return []column{name, {"CIDR", "spec.cidr"}, {"SELECTOR", "spec.nodeSelector"}}
	case "Node":
		if wide {
			return []column{name, {"ASN", "spec.bgp.asNumber"}, {"IPV4", "spec.bgp.ipv4Address"}, {"IPV6", "spec.bgp.ipv6Address"}}
		}
		return []column{name}
	case "BGPPeer":
		cols := []column{name, {"PEERIP", "spec.peerIP"}, {"NODE", "spec.node"}, {"ASN", "spec.asNumber"}}
		if wide {
			cols = append(cols, column{"NODESELECTOR", "spec.nodeSelector"}, column{"PEERSELECTOR", "spec.peerSelector"})
		}
		return cols
	case "WorkloadEndpoint":
		return []column{{"WORKLOAD", "spec.workload"}, {"NAME", "metadata.name"}, {"NODE", "spec.node"}, {"NETWORKS", "spec.ipNetworks"}, {"INTERFACE", "spec.interfaceName"}}
	case "HostEndpoint":
		return []column{name, {"NODE", "spec.node"}, {"INTERFACE", "spec.interfaceName"}, {"IPS", "spec.expectedIPs"}}
	case "NetworkPolicy", "GlobalNetworkPolicy":
		if wide {
			return []column{name, {"ORDER", "spec.order"}, {"SELECTOR", "spec.selector"}, {"TYPES", "spec.types"}}
		}
		return []column{name}
	case "NetworkSet", "GlobalNetworkSet":
		if wide {
			return []column{name, {"NETS", "spec.nets"}}
		}
		return []column{name}
	case "IPReservation":
		return []column{name, {"CIDRS", "spec.reservedCIDRs"}}
	case "Tier":
		return []column{name, {"ORDER", "spec.order"}, {"DEFAULTACTION", "spec.defaultAction"}}
	default:
		return []column{name}
	}
}

func printTable(w io.Writer, kind string, objs []api.Object, wide, withNS bool) error {
	cols := tableColumns(kind, wide)
	if withNS {
		cols = append([]column{{"NAMESPACE", "metadata.namespace"}}, cols...)
	}
	tw := tabwriter.NewWriter(w, 2, 4, 3, ' ', 0)
	headers := make([]string, len(cols))
	for i, c := range cols {
		headers[i] = c.header
	}
	fmt.Fprintln(tw, strings.Join(headers, "\t")+"\t")
	for _, o := range objs {
		raw, err := json.Marshal(o)
		if err != nil {
			return fmt.Errorf("encode %s: %w", o.Meta().Name, err)
		}
		var doc map[string]any
		if err := json.Unmarshal(raw, &doc); err != nil {
			return err
		}
		cells := make([]string, len(cols))
		for i, c := range cols {
			cells[i] = cell(lookupPath(doc, c.path))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	return tw.Flush()
}

func lookupPath(doc map[string]any, path string) any {
	var cur any = doc
	for _, p := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = cell(e)
		}
		return strings.Join(parts, ",")
	case float64:
		return fmt.Sprintf("%g", x)
	default:
		return fmt.Sprint(x)
	}
}
