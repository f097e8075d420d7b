package ctl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/projectcalico/calico-node/internal/datastore"
	"github.com/projectcalico/calico-node/internal/ipam"
	"github.com/projectcalico/calico-node/internal/model/api"
)

// The migration file is calicoctl's: the v3 resources as one YAML
// <Kind>List per kind, each followed by "---"; a "===" line; the
// ClusterInformation as indented JSON; a "===" line; IPAM's keys and
// values as indented JSON (ipam.Export).
const migrationSeparator = "===\n"

// migrationKinds are the kinds an export holds, in calicoctl's order:
// tiers before the policies in them, Nodes before the node-specific
// FelixConfigurations and BGPConfigurations that are renamed after them.
// Calico's staged policies are not kinds of this project.
var migrationKinds = []string{
	"IPPool", "BGPPeer", "Tier", "GlobalNetworkPolicy", "GlobalNetworkSet", "HostEndpoint",
	"KubeControllersConfiguration", "NetworkPolicy", "NetworkSet", "Node",
	"BGPConfiguration", "FelixConfiguration", "IPReservation", "BGPFilter",
}

// computedKinds are exported only from the Kubernetes datastore, where
// they are computed from Pods, Namespaces and ServiceAccounts: on etcd the
// CNI plugin and the controllers write them, and a cluster going back to
// etcd needs its running pods' endpoints there (calicoctl, which only
// exports etcd, leaves them out).
var computedKinds = []string{"Profile", "WorkloadEndpoint"}

// protectedTiers are the tiers Calico creates itself on every datastore
// (calico-node's start-up, calicoctl's first write), so they do not make a
// target non-empty.
var protectedTiers = []string{"default", api.AdminNetworkPolicyTierName, api.BaselineAdminNetworkPolicyTierName}

// Names of policies that mirror Kubernetes objects: they are never
// exported (the controllers or the Kubernetes datastore make them again
// from the Kubernetes objects) and do not make a target non-empty.
const (
	k8sPolicyPrefix         = "knp.default."
	k8sAdminPolicyPrefix    = "kanp.adminnetworkpolicy."
	k8sBaselinePolicyPrefix = "kbanp.baselineadminnetworkpolicy."
)

// kubeLabelsAnnotation is the Kubernetes datastore's computed echo of a
// Node's Kubernetes labels; it means nothing on etcd.
const kubeLabelsAnnotation = "projectcalico.org/kube-labels"

// defaultAllowProfile is the Kubernetes datastore's static profile; etcd
// has no such profile.
const defaultAllowProfile = "projectcalico-default-allow"

// kindList is one kind's section of the file.
type kindList struct {
	kind     string
	revision int64
	items    []api.Object
}

// migrationFile is an export, ready to write.
type migrationFile struct {
	lists       []kindList
	clusterInfo *api.ClusterInformation
	ipam        *ipam.Export
}

// write renders f as calicoctl does.
func (f *migrationFile) write(w io.Writer) error {
	var b bytes.Buffer
	for _, l := range f.lists {
		items := l.items
		if items == nil {
			items = []api.Object{}
		}
		for _, o := range items {
			o.Type().APIVersion = api.GroupVersion
		}
		list := map[string]any{
			"apiVersion": api.GroupVersion,
			"kind":       l.kind + "List",
			"items":      items,
			"metadata":   map[string]any{"resourceVersion": strconv.FormatInt(l.revision, 10)},
		}
		js, err := json.Marshal(list)
		if err != nil {
			return fmt.Errorf("encode %s: %w", l.kind, err)
		}
		y, err := yaml.JSONToYAML(js)
		if err != nil {
			return fmt.Errorf("encode %s: %w", l.kind, err)
		}
		b.Write(y)
		b.WriteString("---\n")
	}
	b.WriteString(migrationSeparator)
	ci, err := json.MarshalIndent(f.clusterInfo, "", "  ")
	if err != nil {
		return fmt.Errorf("encode ClusterInformation: %w", err)
	}
	b.Write(ci)
	b.WriteString("\n" + migrationSeparator)
	ip, err := json.MarshalIndent(f.ipam, "", "  ")
	if err != nil {
		return fmt.Errorf("encode IPAM data: %w", err)
	}
	b.Write(ip)
	b.WriteString("\n")
	_, err = w.Write(b.Bytes())
	return err
}

// exportLists turns what was listed from a datastore of type src into the
// file's sections: metadata the target assigns (uid, resourceVersion,
// creationTimestamp, deletion fields) dropped, objects mirrored from
// Kubernetes left out, and, from etcd, each Node renamed to its Kubernetes
// node name (its "k8s" orchRef; a Node without one is an error, as in
// calicoctl) with the node.<name> configurations following it. It returns
// the renames for IPAM's data.
func exportLists(src string, lists []kindList) ([]kindList, map[string]string, error) {
	renames := map[string]string{}
	if src != datastore.TypeKubernetes {
		for _, l := range lists {
			for _, o := range l.items {
				if n, ok := o.(*api.Node); ok {
					k8sName, err := k8sNodeName(n)
					if err != nil {
						return nil, nil, err
					}
					renames[n.Name] = k8sName
				}
			}
		}
	}
	out := make([]kindList, 0, len(lists))
	for _, l := range lists {
		kept := make([]api.Object, 0, len(l.items))
		for _, o := range l.items {
			if exportObject(src, o, renames) {
				kept = append(kept, o)
			}
		}
		out = append(out, kindList{kind: l.kind, revision: l.revision, items: kept})
	}
	return out, renames, nil
}

// k8sNodeName is the name of n's Kubernetes node: its "k8s" orchRef.
func k8sNodeName(n *api.Node) (string, error) {
	name := ""
	for _, ref := range n.Spec.OrchRefs {
		if ref.Orchestrator == api.OrchestratorKubernetes {
			name = ref.NodeName
		}
	}
	if name == "" {
		return "", fmt.Errorf("node %s missing a 'k8s' orchestrator reference. Unable to export data unless every node has a 'k8s' orchestrator reference", n.Name)
	}
	return name, nil
}

// exportObject cleans o in place and says whether it belongs in the file.
// renames holds every Node's rename (etcd name → Kubernetes name); what
// names a node follows it: the Node, node.<name> configurations and,
// beyond calicoctl (which leaves them pointing at a name that no longer
// exists), host endpoints and node-specific BGP peers.
func exportObject(src string, o api.Object, renames map[string]string) bool {
	m := o.Meta()
	m.UID, m.ResourceVersion, m.CreationTimestamp = "", "", ""
	m.DeletionTimestamp, m.DeletionGracePeriodSeconds = "", nil
	m.SelfLink, m.Generation, m.ManagedFields = "", 0, nil
	switch o := o.(type) {
	case *api.NetworkPolicy:
		return !strings.HasPrefix(o.Name, k8sPolicyPrefix)
	case *api.GlobalNetworkPolicy:
		return !strings.HasPrefix(o.Name, k8sAdminPolicyPrefix) && !strings.HasPrefix(o.Name, k8sBaselinePolicyPrefix)
	case *api.Node:
		if src == datastore.TypeKubernetes {
			delete(o.Annotations, kubeLabelsAnnotation)
			if len(o.Annotations) == 0 {
				o.Annotations = nil
			}
			return true
		}
		if n, ok := renames[o.Name]; ok {
			o.Name = n
		}
	case *api.HostEndpoint:
		if n, ok := renames[o.Spec.Node]; ok {
			o.Spec.Node = n
		}
	case *api.BGPPeer:
		if n, ok := renames[o.Spec.Node]; ok {
			o.Spec.Node = n
		}
	case *api.FelixConfiguration:
		o.Name = renamedNodeConfig(o.Name, renames)
		titleIptablesActions(&o.Spec)
	case *api.BGPConfiguration:
		o.Name = renamedNodeConfig(o.Name, renames)
	case *api.Profile:
		return o.Name != defaultAllowProfile
	case *api.WorkloadEndpoint:
		// A finished pod's endpoint has no addresses; on etcd the CNI
		// plugin's DEL would have removed it.
		return len(o.Spec.IPNetworks) > 0
	}
	return true
}

func renamedNodeConfig(name string, renames map[string]string) string {
	if node, ok := strings.CutPrefix(name, "node."); ok {
		if n, ok := renames[node]; ok {
			return "node." + n
		}
	}
	return name
}

// titleIptablesActions is calicoctl's ConvertIptablesFields: action
// values written in another case by the v1 API become the v3 spelling.
func titleIptablesActions(s *api.FelixConfigurationSpec) {
	for _, p := range []*string{&s.DefaultEndpointToHostAction, &s.IptablesFilterAllowAction, &s.IptablesMangleAllowAction, &s.IptablesFilterDenyAction} {
		if *p != "" {
			*p = strings.ToUpper((*p)[:1]) + strings.ToLower((*p)[1:])
		}
	}
}

// parsedMigration is a migration file as read back.
type parsedMigration struct {
	docs        []inputDoc
	clusterInfo *api.ClusterInformation
	ipam        *ipam.Export
}

// parseMigrationFile splits data into its three parts and decodes each.
// The resources are decoded but not validated (prepare does that).
func parseMigrationFile(name string, data []byte) (*parsedMigration, error) {
	parts := bytes.Split(data, []byte(migrationSeparator))
	if len(parts) != 3 {
		return nil, fmt.Errorf("imported file: %s is improperly formatted (want the resources, the ClusterInformation and the IPAM data separated by \"===\" lines). Try recreating with 'calicoctl datastore migrate export'", name)
	}
	out := &parsedMigration{}
	resources, err := dropUnsupportedLists(parts[0])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	docs, err := api.Decode(resources)
	if err != nil {
		return nil, fmt.Errorf("%s: resources: %w", name, err)
	}
	for _, d := range docs {
		out.docs = append(out.docs, inputDoc{Document: d, source: name})
	}
	ci := &api.ClusterInformation{}
	if err := json.Unmarshal(parts[1], ci); err != nil {
		return nil, fmt.Errorf("%s: cluster information: %w", name, err)
	}
	out.clusterInfo = ci
	out.ipam = &ipam.Export{}
	if len(bytes.TrimSpace(parts[2])) > 0 {
		if err := json.Unmarshal(parts[2], out.ipam); err != nil {
			return nil, fmt.Errorf("%s: IPAM data: %w", name, err)
		}
	}
	return out, nil
}

// unsupportedLists are the sections of calicoctl's export for Calico kinds
// this project does not have. Empty, as they are in most clusters, they
// are dropped; with items, the import is refused rather than losing them.
var unsupportedLists = []string{
	"StagedGlobalNetworkPolicyList", "StagedNetworkPolicyList", "StagedKubernetesNetworkPolicyList",
}

// dropUnsupportedLists removes the empty sections of unsupportedLists
// from the resources part (YAML documents separated by "---" lines).
func dropUnsupportedLists(data []byte) ([]byte, error) {
	var kept [][]byte
	for _, chunk := range bytes.Split(data, []byte("\n---\n")) {
		var head struct {
			Kind  string            `json:"kind"`
			Items []json.RawMessage `json:"items"`
		}
		if yaml.Unmarshal(chunk, &head) == nil && slices.Contains(unsupportedLists, head.Kind) {
			if len(head.Items) > 0 {
				return nil, fmt.Errorf("the export holds %d %s items: calico-node has no %s kind, so they cannot be imported", len(head.Items), head.Kind, strings.TrimSuffix(head.Kind, "List"))
			}
			continue
		}
		kept = append(kept, chunk)
	}
	return bytes.Join(kept, []byte("\n---\n")), nil
}

// occupying says whether an object found in an import's target is user
// data that the import would collide with; what every cluster of the
// target's type has anyway is not.
func occupying(o api.Object) bool {
	switch o := o.(type) {
	case *api.Tier:
		return !slices.Contains(protectedTiers, o.Name)
	case *api.NetworkPolicy:
		return !strings.HasPrefix(o.Name, k8sPolicyPrefix)
	case *api.GlobalNetworkPolicy:
		return !strings.HasPrefix(o.Name, k8sAdminPolicyPrefix) && !strings.HasPrefix(o.Name, k8sBaselinePolicyPrefix)
	}
	return true
}
