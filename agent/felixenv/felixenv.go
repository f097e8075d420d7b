// Package felixenv reads the FELIX_* environment variables a Calico user
// puts on the calico-node DaemonSet (FELIX_DEFAULTENDPOINTTOHOSTACTION,
// FELIX_IPV6SUPPORT, FELIX_IPINIPMTU, ...) into a FelixConfigurationSpec
// that overrides the datastore's FelixConfiguration, as Felix's
// environment config source outranks the datastore's.
//
// # Model
//
// FELIX_<NAME> sets the FelixConfiguration field whose JSON name, Go field
// name or Felix v1 config name (IpInIpMtu, ReportingIntervalSecs, ...)
// equals NAME case-insensitively. Values use Felix's spellings: booleans
// true/false/yes/no/1/0/t/f/y/n, integers in decimal or 0x hex, durations
// as seconds ("90", "0.5"; milliseconds for the *Millis names) or Go
// durations ("1m30s"), lists comma-separated ("tcp:22,udp:68",
// "30000:32767"), failsafe ports as protocol:port or protocol:net:port,
// route table ranges as "1-250,300-400", key=value lists for timeout
// overrides and log filters; enumerations match case-insensitively
// (ACCEPT means Accept); any structured field also takes JSON. Unknown
// names are reported, not fatal; a bad value is an error naming the
// variable.
//
// Merge layers specs field by field, as Felix layers its config sources:
// Merge(default, node.<name>, environment) is the configuration in effect
// on a node. Every consumer of a FelixConfiguration field reads it from
// that one merge; ForNode picks the layers for a node.
//
// FieldStatuses says, for every field, whether calico-node honours it
// (Honoured, EnvOnly, Partly with the supported values, Ignored,
// NotApplicable); Unhonoured lists the fields of a merged configuration
// set to values it does not honour, for the agent to report, and
// StatusMarkdown is the table docs/configuration.md carries.
//
// # Design
//
// Field lookup is by reflection over api.FelixConfigurationSpec's struct
// tags, so a field added to the API type is settable without touching
// this package. Each value is converted according to the field's Go type
// and then checked by the API's own validation, one variable at a time so
// that an error names the variable. Parse is pure: the environment is
// passed in.
//
// # Thread safety
//
// Parse, Merge, ForNode and Unhonoured have no state and may be called
// concurrently.
package felixenv

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/projectcalico/calico-node/internal/model/api"
)

// Prefix starts every Felix environment variable.
const Prefix = "FELIX_"

// Overrides are the FELIX_* settings found in an environment.
type Overrides struct {
	// Spec holds the values set; nil when no variable named a field. It
	// takes precedence over every FelixConfiguration in the datastore.
	Spec *api.FelixConfigurationSpec
	// Set are the variables applied, sorted.
	Set []string
	// Unknown are FELIX_* variables that name no FelixConfiguration
	// field, sorted; callers warn about them.
	Unknown []string
	// Bootstrap are FELIX_* variables Felix reads for its own bootstrap
	// (datastore, Typha, hostname); this agent takes those settings from
	// its own flags, so they are ignored.
	Bootstrap []string
}

// bootstrapNames are Felix settings that are not FelixConfiguration fields
// (lower case, without the prefix).
var bootstrapNames = []string{
	"datastoretype", "felixhostname", "nodename",
	"etcdaddr", "etcdscheme", "etcdkeyfile", "etcdcertfile", "etcdcafile", "etcdendpoints",
	"typhaaddr", "typhak8sservicename", "typhak8snamespace", "typhareadtimeout", "typhawritetimeout",
	"typhakeyfile", "typhacertfile", "typhacafile", "typhacn", "typhaurisan",
	"ipiniptunneladdr", "ipv4vxlantunneladdr", "ipv6vxlantunneladdr",
	"vxlantunnelmacaddr", "vxlantunnelmacaddrv6", "configfile",
}

// v1Names are Felix's own config names where they differ from the API's
// (the confignamev1 tags of Calico's FelixConfigurationSpec), lower case,
// mapped to the JSON field name.
var v1Names = map[string]string{
	"ipinipenabled":                      "ipipEnabled",
	"ipinipmtu":                          "ipipMTU",
	"iptablespostwritecheckintervalsecs": "iptablesPostWriteCheckInterval",
	"iptableslockprobeintervalmillis":    "iptablesLockProbeInterval",
	"netlinktimeoutsecs":                 "netlinkTimeout",
	"reportingintervalsecs":              "reportingInterval",
	"reportingttlsecs":                   "reportingTTL",
	"endpointreportingdelaysecs":         "endpointReportingDelay",
	"usagereportinginitialdelaysecs":     "usageReportingInitialDelay",
	"usagereportingintervalsecs":         "usageReportingInterval",
}

// field is one settable FelixConfigurationSpec field.
type field struct {
	index    int
	jsonName string
	typ      reflect.Type
}

// fields indexes the spec's fields by every accepted lower-case name.
func fields() map[string]field {
	t := reflect.TypeFor[api.FelixConfigurationSpec]()
	out := map[string]field{}
	byJSON := map[string]field{}
	for i := range t.NumField() {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		f := field{index: i, jsonName: name, typ: sf.Type}
		byJSON[name] = f
		out[strings.ToLower(name)] = f
		if _, taken := out[strings.ToLower(sf.Name)]; !taken {
			out[strings.ToLower(sf.Name)] = f
		}
	}
	for v1, jsonName := range v1Names {
		if f, ok := byJSON[jsonName]; ok {
			out[v1] = f
		}
	}
	return out
}

// Parse reads the FELIX_* variables of environ ("NAME=value" strings, as
// os.Environ returns them).
func Parse(environ []string) (Overrides, error) {
	var out Overrides
	idx := fields()
	spec := &api.FelixConfigurationSpec{}
	var errs []error
	// Sorted, so errors and results do not depend on environment order.
	env := slices.Clone(environ)
	sort.Strings(env)
	for _, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, Prefix) {
			continue
		}
		key := strings.ToLower(strings.TrimPrefix(name, Prefix))
		f, known := idx[key]
		if !known {
			if slices.Contains(bootstrapNames, key) {
				out.Bootstrap = append(out.Bootstrap, name)
			} else {
				out.Unknown = append(out.Unknown, name)
			}
			continue
		}
		if err := set(spec, f, key, value); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", name, value, err))
			continue
		}
		out.Set = append(out.Set, name)
	}
	if len(errs) > 0 {
		return Overrides{}, errors.Join(errs...)
	}
	if len(out.Set) > 0 {
		// Fields valid alone may still conflict (routeTableRange with
		// routeTableRanges).
		fc := &api.FelixConfiguration{Spec: *spec}
		fc.Name = "default"
		if err := fc.Validate(); err != nil {
			return Overrides{}, fmt.Errorf("FELIX_* settings: %w", err)
		}
		out.Spec = spec
	}
	return out, nil
}

// set converts value for field f, checks it with the API's validation and
// stores it in spec.
func set(spec *api.FelixConfigurationSpec, f field, key, value string) error {
	unit := time.Second
	if strings.HasSuffix(key, "millis") {
		unit = time.Millisecond
	}
	v, err := convert(f.typ, strings.TrimSpace(value), unit)
	if err != nil {
		return err
	}
	// Validate the field alone; an enumeration spelt in another case
	// ("ACCEPT") is matched against the values the validation lists.
	for attempt := 0; ; attempt++ {
		probe := &api.FelixConfiguration{}
		probe.Name = "default"
		reflect.ValueOf(&probe.Spec).Elem().Field(f.index).Set(v)
		err := probe.Validate()
		if err == nil {
			break
		}
		var verr api.ValidationError
		if attempt == 0 && errors.As(err, &verr) {
			if fixed, ok := canonicalEnum(verr, f, v); ok {
				v = fixed
				continue
			}
		}
		return err
	}
	reflect.ValueOf(spec).Elem().Field(f.index).Set(v)
	return nil
}

// enumAliases are Felix spellings of enumerated values that differ from
// the API's by more than case.
var enumAliases = map[string]string{"warn": "warning"}

// canonicalEnum re-spells a string value the validation rejected as "must
// be one of A, B" when it equals one of them ignoring case.
func canonicalEnum(verr api.ValidationError, f field, v reflect.Value) (reflect.Value, bool) {
	const oneOf = "must be one of "
	for _, fe := range verr {
		if fe.Path != "spec."+f.jsonName || !strings.HasPrefix(fe.Msg, oneOf) {
			continue
		}
		s := v
		if s.Kind() == reflect.Pointer {
			s = s.Elem()
		}
		if s.Kind() != reflect.String {
			return reflect.Value{}, false
		}
		got := strings.ToLower(s.String())
		if a, ok := enumAliases[got]; ok {
			got = a
		}
		for _, allowed := range strings.Split(strings.TrimPrefix(fe.Msg, oneOf), ", ") {
			if strings.ToLower(allowed) == got {
				out := reflect.New(s.Type()).Elem()
				out.SetString(allowed)
				if v.Kind() == reflect.Pointer {
					p := reflect.New(s.Type())
					p.Elem().Set(out)
					return p, true
				}
				return out, true
			}
		}
	}
	return reflect.Value{}, false
}

// Types with Felix-specific text forms.
var (
	durationType     = reflect.TypeFor[api.Duration]()
	portType         = reflect.TypeFor[api.Port]()
	protoPortType    = reflect.TypeFor[api.ProtoPort]()
	routeRangesType  = reflect.TypeFor[api.RouteTableRanges]()
	routeRangeType   = reflect.TypeFor[api.RouteTableRange]()
	healthTimeoutsTy = reflect.TypeFor[[]api.HealthTimeoutOverride]()
)

// convert parses s into a value of type t.
func convert(t reflect.Type, s string, unit time.Duration) (reflect.Value, error) {
	if t.Kind() == reflect.Pointer {
		v, err := convert(t.Elem(), s, unit)
		if err != nil {
			return reflect.Value{}, err
		}
		p := reflect.New(t.Elem())
		p.Elem().Set(v)
		return p, nil
	}
	out := reflect.New(t).Elem()
	// Anything structured may be given as JSON, in the API's own shape.
	if k := t.Kind(); (k == reflect.Struct || k == reflect.Slice || k == reflect.Map) && t != durationType &&
		(strings.HasPrefix(s, "[") || strings.HasPrefix(s, "{")) {
		if err := json.Unmarshal([]byte(s), out.Addr().Interface()); err != nil {
			return reflect.Value{}, fmt.Errorf("not valid JSON for this setting: %w", err)
		}
		return out, nil
	}
	switch t {
	case durationType:
		d, err := parseDuration(s, unit)
		if err != nil {
			return reflect.Value{}, err
		}
		out.Set(reflect.ValueOf(api.Duration{Duration: d}))
		return out, nil
	case portType:
		p, err := api.PortFromString(s)
		if err != nil {
			return reflect.Value{}, err
		}
		out.Set(reflect.ValueOf(p))
		return out, nil
	case protoPortType:
		pp, err := parseProtoPort(s)
		if err != nil {
			return reflect.Value{}, err
		}
		out.Set(reflect.ValueOf(pp))
		return out, nil
	case routeRangesType:
		var rs api.RouteTableRanges
		for _, item := range splitList(s) {
			lo, hi, err := parseRange(item)
			if err != nil {
				return reflect.Value{}, err
			}
			rs = append(rs, api.RouteTableIDRange{Min: lo, Max: hi})
		}
		out.Set(reflect.ValueOf(rs))
		return out, nil
	case routeRangeType:
		lo, hi, err := parseRange(s)
		if err != nil {
			return reflect.Value{}, err
		}
		out.Set(reflect.ValueOf(api.RouteTableRange{Min: lo, Max: hi}))
		return out, nil
	case healthTimeoutsTy:
		var hs []api.HealthTimeoutOverride
		for _, item := range splitList(s) {
			k, v, ok := strings.Cut(item, "=")
			if !ok {
				return reflect.Value{}, fmt.Errorf("%q is not name=duration", item)
			}
			d, err := parseDuration(strings.TrimSpace(v), time.Second)
			if err != nil {
				return reflect.Value{}, err
			}
			hs = append(hs, api.HealthTimeoutOverride{Name: strings.TrimSpace(k), Timeout: api.Duration{Duration: d}})
		}
		out.Set(reflect.ValueOf(hs))
		return out, nil
	}
	switch t.Kind() {
	case reflect.String:
		out.SetString(s)
	case reflect.Bool:
		b, err := parseBool(s)
		if err != nil {
			return reflect.Value{}, err
		}
		out.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(s, 0, t.Bits())
		if err != nil {
			return reflect.Value{}, fmt.Errorf("not an integer of %d bits", t.Bits())
		}
		out.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(s, 0, t.Bits())
		if err != nil {
			return reflect.Value{}, fmt.Errorf("not an unsigned integer of %d bits (decimal or 0x hex)", t.Bits())
		}
		out.SetUint(n)
	case reflect.Slice:
		items := splitList(s)
		sl := reflect.MakeSlice(t, 0, len(items))
		for _, item := range items {
			v, err := convert(t.Elem(), item, unit)
			if err != nil {
				return reflect.Value{}, fmt.Errorf("item %q: %w", item, err)
			}
			sl = reflect.Append(sl, v)
		}
		out.Set(sl)
	case reflect.Map:
		if t.Key().Kind() != reflect.String || t.Elem().Kind() != reflect.String {
			return reflect.Value{}, errors.New("give this setting as JSON")
		}
		m := reflect.MakeMap(t)
		for _, item := range splitList(s) {
			k, v, ok := strings.Cut(item, "=")
			if !ok {
				return reflect.Value{}, fmt.Errorf("%q is not key=value", item)
			}
			m.SetMapIndex(reflect.ValueOf(strings.TrimSpace(k)).Convert(t.Key()), reflect.ValueOf(strings.TrimSpace(v)).Convert(t.Elem()))
		}
		out.Set(m)
	case reflect.Struct:
		// key=value pairs naming the struct's JSON fields, e.g.
		// FELIX_BPFCONNTRACKTIMEOUTS="tcpEstablished=1h,udpTimeout=60s".
		obj := map[string]string{}
		for _, item := range splitList(s) {
			k, v, ok := strings.Cut(item, "=")
			if !ok {
				return reflect.Value{}, fmt.Errorf("%q is not key=value (or give JSON)", item)
			}
			obj[structKey(t, strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
		data, _ := json.Marshal(obj)
		if err := json.Unmarshal(data, out.Addr().Interface()); err != nil {
			return reflect.Value{}, err
		}
	default:
		return reflect.Value{}, fmt.Errorf("unsupported setting type %s", t)
	}
	return out, nil
}

// structKey maps k to the JSON name of t's field that matches it ignoring
// case.
func structKey(t reflect.Type, k string) string {
	for i := range t.NumField() {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if strings.EqualFold(name, k) || strings.EqualFold(sf.Name, k) {
			return name
		}
	}
	return k
}

// splitList splits a comma-separated list; "none" and "" are the empty
// list, as in Felix.
func splitList(s string) []string {
	if s == "" || strings.EqualFold(s, "none") {
		return nil
	}
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// parseBool accepts Felix's boolean spellings.
func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "true", "t", "yes", "y", "1", "on":
		return true, nil
	case "false", "f", "no", "n", "0", "off":
		return false, nil
	}
	return false, errors.New("not a boolean (true or false)")
}

// parseDuration reads a number of units or a Go duration.
func parseDuration(s string, unit time.Duration) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f < 0 {
			return 0, errors.New("must not be negative")
		}
		return time.Duration(f * float64(unit)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("not a duration (seconds such as 90, or 1m30s)")
	}
	return d, nil
}

// parseRange reads "min-max" (or a single number).
func parseRange(s string) (int, int, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "-")
	if !ok {
		b = a
	}
	lo, err1 := strconv.Atoi(strings.TrimSpace(a))
	hi, err2 := strconv.Atoi(strings.TrimSpace(b))
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("%q is not a range min-max", s)
	}
	return lo, hi, nil
}

// parseProtoPort reads Felix's failsafe port forms: "tcp:22",
// "udp:10.0.0.0/8:53", "tcp:[fd00::/8]:22", or a bare port (TCP).
func parseProtoPort(s string) (api.ProtoPort, error) {
	bad := fmt.Errorf("%q is not protocol:port or protocol:net:port", s)
	proto, rest, ok := strings.Cut(s, ":")
	if !ok {
		proto, rest = "tcp", s
	}
	var netPart string
	if strings.HasPrefix(rest, "[") {
		end := strings.Index(rest, "]:")
		if end < 0 {
			return api.ProtoPort{}, bad
		}
		netPart, rest = rest[1:end], rest[end+2:]
	} else if n, p, ok := strings.Cut(rest, ":"); ok {
		netPart, rest = n, p
	}
	port, err := strconv.ParseUint(rest, 10, 16)
	if err != nil {
		return api.ProtoPort{}, bad
	}
	if netPart != "" {
		if _, err := netip.ParsePrefix(netPart); err != nil {
			if _, err := netip.ParseAddr(netPart); err != nil {
				return api.ProtoPort{}, fmt.Errorf("%q: %q is not a network", s, netPart)
			}
		}
	}
	return api.ProtoPort{Protocol: strings.ToLower(proto), Port: uint16(port), Net: netPart}, nil
}
