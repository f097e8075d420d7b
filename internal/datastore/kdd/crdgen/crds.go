package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/projectcalico/calico-node/internal/model/api"
)

const group = "crd.projectcalico.org"

// crdKind is one custom resource: its names and the Go types of its spec
// and (optional) status.
type crdKind struct {
	Kind, Plural string
	Namespaced   bool
	Spec, Status reflect.Type
}

// notCRDs are the api kinds Calico does not store as custom resources in
// KDD: they are computed from Kubernetes Nodes, Pods, Namespaces and
// ServiceAccounts.
var notCRDs = []string{"Node", "WorkloadEndpoint", "Profile"}

// extraKinds are the custom resources package api does not model (see
// types.go).
var extraKinds = []crdKind{
	{Kind: "BlockAffinity", Plural: "blockaffinities", Spec: reflect.TypeFor[blockAffinitySpec]()},
	{Kind: "CalicoNodeStatus", Plural: "caliconodestatuses",
		Spec: reflect.TypeFor[calicoNodeStatusSpec](), Status: reflect.TypeFor[calicoNodeStatusStatus]()},
	{Kind: "IPAMBlock", Plural: "ipamblocks", Spec: reflect.TypeFor[ipamBlockSpec]()},
	{Kind: "IPAMConfig", Plural: "ipamconfigs", Spec: reflect.TypeFor[ipamConfigSpec]()},
	{Kind: "IPAMHandle", Plural: "ipamhandles", Spec: reflect.TypeFor[ipamHandleSpec]()},
	{Kind: "StagedGlobalNetworkPolicy", Plural: "stagedglobalnetworkpolicies",
		Spec: reflect.TypeFor[stagedGlobalNetworkPolicySpec]()},
	{Kind: "StagedKubernetesNetworkPolicy", Plural: "stagedkubernetesnetworkpolicies", Namespaced: true,
		Spec: reflect.TypeFor[stagedKubernetesNetworkPolicySpec]()},
	{Kind: "StagedNetworkPolicy", Plural: "stagednetworkpolicies", Namespaced: true,
		Spec: reflect.TypeFor[stagedNetworkPolicySpec]()},
}

// kinds returns every custom resource, sorted by plural: the api kinds
// stored as CRDs (their spec and status types read from the registry) and
// the extra ones.
func kinds() ([]crdKind, error) {
	out := slices.Clone(extraKinds)
	for _, info := range api.Kinds() {
		if slices.Contains(notCRDs, info.Kind) {
			continue
		}
		k := crdKind{Kind: info.Kind, Plural: info.Plural, Namespaced: info.Namespaced}
		t := reflect.TypeOf(info.New()).Elem()
		for i := range t.NumField() {
			f := t.Field(i)
			switch name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name {
			case "spec":
				k.Spec = f.Type
			case "status":
				k.Status = f.Type
			}
		}
		if k.Spec == nil {
			return nil, fmt.Errorf("api kind %s has no spec field", info.Kind)
		}
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b crdKind) int { return strings.Compare(a.Plural, b.Plural) })
	return out, nil
}

func intOrString() *schema {
	return &schema{AnyOf: []*schema{{Type: "integer"}, {Type: "string"}}, IntOrString: true}
}

func enum(values ...string) func(*schema) {
	return func(s *schema) { s.Enum = values }
}

func defaultValue(v any) func(*schema) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only literals are passed
	}
	return func(s *schema) { s.Default = b }
}

func bounds(lo, hi *int64) func(*schema) {
	return func(s *schema) { s.Minimum, s.Maximum = lo, hi }
}

func atomicList(s *schema) { s.ListType = "atomic" }
func atomicMap(s *schema)  { s.MapType = "atomic" }

func all(fs ...func(*schema)) func(*schema) {
	return func(s *schema) {
		for _, f := range fs {
			f(s)
		}
	}
}

// calicoRules are the details of Calico v3.31's CRDs (libcalico-go/config/crd)
// that the Go types do not carry. Enums, defaults and bounds are Calico's,
// exactly where Calico has them; Calico's regular-expression patterns are
// left out: they repeat what validation (calicoctl, datastore.Prepare)
// checks with better messages, and some are wrong (its duration pattern
// refuses "1.5s").
func calicoRules() rules {
	enabled := enum("Enabled", "Disabled")
	felix := func(field string, adjust func(*schema)) (fieldKey, fieldRule) {
		return key(api.FelixConfigurationSpec{}, field), fieldRule{adjust: adjust}
	}
	r := rules{
		types: map[reflect.Type]func() *schema{
			reflect.TypeFor[api.Protocol]():       intOrString,
			reflect.TypeFor[api.Port]():           intOrString,
			reflect.TypeFor[api.DSCP]():           intOrString,
			reflect.TypeFor[api.Uint8OrString]():  intOrString,
			reflect.TypeFor[intstr.IntOrString](): intOrString,
			// An AS number is written as a number; Calico's CRD calls it
			// int32, but 4-byte AS numbers go to 4294967295.
			reflect.TypeFor[api.ASNumber](): func() *schema { return integer(reflect.Uint32) },
			reflect.TypeFor[api.Duration](): func() *schema { return &schema{Type: "string"} },
			// metav1.Time writes null when zero, even with omitempty.
			reflect.TypeFor[metav1.Time](): func() *schema {
				return &schema{Type: "string", Format: "date-time", Nullable: true}
			},
		},
		fields: map[fieldKey]fieldRule{
			key(api.IPPoolSpec{}, "assignmentMode"): {adjust: enum("Automatic", "Manual")},
			key(api.TierSpec{}, "defaultAction"):    {adjust: enum("Pass", "Deny")},

			key(api.BGPConfigurationSpec{}, "serviceLoadBalancerAggregation"): {adjust: all(enabled, defaultValue("Enabled"))},
			key(api.BGPConfigurationSpec{}, "listenPort"):                     {adjust: bounds(ptr(int64(1)), ptr(int64(65535)))},
			key(api.BGPPassword{}, "secretKeyRef"):                            {adjust: atomicMap},
			key(api.SecretKeySelector{}, "name"):                              {adjust: defaultValue("")},
			key(api.BGPPeerSpec{}, "nextHopMode"):                             {adjust: enum("Auto", "Self", "Keep")},
			key(api.BGPPeerSpec{}, "reversePeering"):                          {adjust: enum("Auto", "Manual")},

			key(api.Template{}, "generateName"): {adjust: func(s *schema) { s.MaxLength = ptr(int64(253)) }},

			key(ipamBlockSpec{}, "sequenceNumber"):    {adjust: defaultValue(0)},
			key(ipamConfigSpec{}, "maxBlocksPerHost"): {adjust: bounds(ptr(int64(0)), ptr(int64(2147483647)))},

			key(api.BGPFilterPrefixLengthV4{}, "min"): {adjust: bounds(ptr(int64(0)), ptr(int64(32)))},
			key(api.BGPFilterPrefixLengthV4{}, "max"): {adjust: bounds(ptr(int64(0)), ptr(int64(32)))},
			key(api.BGPFilterPrefixLengthV6{}, "min"): {adjust: bounds(ptr(int64(0)), ptr(int64(128)))},
			key(api.BGPFilterPrefixLengthV6{}, "max"): {adjust: bounds(ptr(int64(0)), ptr(int64(128)))},

			// Kubernetes' own list and map semantics for server-side apply.
			key(stagedKubernetesNetworkPolicySpec{}, "podSelector"):    {adjust: atomicMap},
			key(networkingv1.NetworkPolicyIngressRule{}, "from"):       {adjust: atomicList},
			key(networkingv1.NetworkPolicyIngressRule{}, "ports"):      {adjust: atomicList},
			key(networkingv1.NetworkPolicyEgressRule{}, "to"):          {adjust: atomicList},
			key(networkingv1.NetworkPolicyEgressRule{}, "ports"):       {adjust: atomicList},
			key(networkingv1.NetworkPolicyPeer{}, "podSelector"):       {adjust: atomicMap},
			key(networkingv1.NetworkPolicyPeer{}, "namespaceSelector"): {adjust: atomicMap},
			key(networkingv1.IPBlock{}, "except"):                      {adjust: atomicList},
			key(metav1.LabelSelector{}, "matchExpressions"):            {adjust: atomicList},
			key(metav1.LabelSelectorRequirement{}, "values"):           {adjust: atomicList},
		},
	}
	for f, e := range map[string][]string{
		"awsSrcDstCheck":                 {"DoNothing", "Enable", "Disable"},
		"bpfAttachType":                  {"TC", "TCX"},
		"bpfConnectTimeLoadBalancing":    {"TCP", "Enabled", "Disabled"},
		"bpfConntrackLogLevel":           {"Off", "Debug"},
		"bpfConntrackMode":               {"Auto", "Userspace", "BPFProgram"},
		"bpfHostNetworkedNATWithoutCTLB": {"Enabled", "Disabled"},
		"bpfJITHardening":                {"Auto", "Strict"},
		"bpfProfiling":                   {"Enabled", "Disabled"},
		"bpfRedirectToPeer":              {"Enabled", "Disabled", "L2Only"},
		"floatingIPs":                    {"Enabled", "Disabled"},
		"flowLogsLocalReporter":          {"Disabled", "Enabled"},
		"flowLogsPolicyEvaluationMode":   {"None", "Continuous"},
		"ipForwarding":                   {"Enabled", "Disabled"},
		"natOutgoingExclusions":          {"IPPoolsOnly", "IPPoolsAndHostIPs"},
		"nftablesMode":                   {"Disabled", "Enabled", "Auto"},
		"programClusterRoutes":           {"Enabled", "Disabled"},
		"windowsManageFirewallRules":     {"Enabled", "Disabled"},
	} {
		k, v := felix(f, enum(e...))
		r.fields[k] = v
	}
	k, v := felix("bpfMapSizeConntrackCleanupQueue", func(s *schema) { s.Minimum = ptr(int64(1)) })
	r.fields[k] = v
	// Written always ("bpfLogLevel":"") but not required by Calico.
	r.fields[key(api.FelixConfigurationSpec{}, "bpfLogLevel")] = fieldRule{optional: true}
	return r
}

// crd is an apiextensions.k8s.io/v1 CustomResourceDefinition, as much of
// it as these use.
type crd struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Group string `json:"group"`
		Names struct {
			Kind     string `json:"kind"`
			ListKind string `json:"listKind"`
			Plural   string `json:"plural"`
			Singular string `json:"singular"`
		} `json:"names"`
		Scope    string       `json:"scope"`
		Versions []crdVersion `json:"versions"`
	} `json:"spec"`
}

type crdVersion struct {
	Name    string `json:"name"`
	Served  bool   `json:"served"`
	Storage bool   `json:"storage"`
	Schema  struct {
		OpenAPIV3Schema *schema `json:"openAPIV3Schema"`
	} `json:"schema"`
}

// build makes the CRD of k.
func build(g *generator, k crdKind) (crd, error) {
	var c crd
	c.APIVersion, c.Kind = "apiextensions.k8s.io/v1", "CustomResourceDefinition"
	c.Metadata.Name = k.Plural + "." + group
	c.Spec.Group = group
	c.Spec.Names.Kind = k.Kind
	c.Spec.Names.ListKind = k.Kind + "List"
	c.Spec.Names.Plural = k.Plural
	c.Spec.Names.Singular = strings.ToLower(k.Kind)
	c.Spec.Scope = "Cluster"
	if k.Namespaced {
		c.Spec.Scope = "Namespaced"
	}
	root := &schema{Type: "object", Properties: map[string]*schema{
		"apiVersion": {Type: "string"},
		"kind":       {Type: "string"},
		"metadata":   {Type: "object"},
	}}
	for name, t := range map[string]reflect.Type{"spec": k.Spec, "status": k.Status} {
		if t == nil {
			continue
		}
		s, err := g.schemaOf(t)
		if err != nil {
			return crd{}, fmt.Errorf("%s %s: %w", k.Kind, name, err)
		}
		root.Properties[name] = s
	}
	v := crdVersion{Name: "v1", Served: true, Storage: true}
	v.Schema.OpenAPIV3Schema = root
	c.Spec.Versions = []crdVersion{v}
	return c, nil
}

const header = `# Code generated by "go run ./internal/datastore/kdd/crdgen"; DO NOT EDIT.
#
# Calico's custom resources (crd.projectcalico.org/v1): every kind Calico v3.31
# defines, with its names and scope, and schemas generated from calico-node's
# Go types. Apply before deploy/calico-node-kdd.yaml:
#
#   kubectl apply -f deploy/crds.yaml
`

// generate renders every CRD as one multi-document YAML file.
func generate() ([]byte, error) {
	ks, err := kinds()
	if err != nil {
		return nil, err
	}
	g := newGenerator(calicoRules())
	if err := g.checkRules(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.WriteString(header)
	for _, k := range ks {
		c, err := build(g, k)
		if err != nil {
			return nil, err
		}
		y, err := yaml.Marshal(c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k.Kind, err)
		}
		buf.WriteString("---\n")
		buf.Write(y)
	}
	return buf.Bytes(), nil
}
