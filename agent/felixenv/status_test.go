package felixenv

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/projectcalico/calico-node/internal/model/api"
	"github.com/projectcalico/calico-node/internal/testkit/goldentest"
)

// TestEveryFieldHasAStatus: the status table names every field of the
// API, once each, in the API's order, so that a field added to
// FelixConfigurationSpec without a decision fails here.
func TestEveryFieldHasAStatus(t *testing.T) {
	typ := reflect.TypeFor[api.FelixConfigurationSpec]()
	var apiFields []string
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		apiFields = append(apiFields, name)
	}
	var table []string
	for _, fs := range FieldStatuses() {
		table = append(table, fs.Field)
		switch {
		case fs.Status == Partly && len(fs.Supported) == 0:
			t.Errorf("%s: %s without supported values", fs.Field, fs.Status)
		case fs.Status != Partly && fs.Supported != nil:
			t.Errorf("%s: supported values on a field that is %s", fs.Field, fs.Status)
		}
		if !slices.Contains([]Status{Honoured, EnvOnly, Partly, Ignored, NotApplicable}, fs.Status) {
			t.Errorf("%s: unknown status %q", fs.Field, fs.Status)
		}
	}
	for _, f := range apiFields {
		if !slices.Contains(table, f) {
			t.Errorf("FelixConfiguration field %s has no status in fieldStatuses", f)
		}
	}
	for _, f := range table {
		if !slices.Contains(apiFields, f) {
			t.Errorf("fieldStatuses names %s, which FelixConfigurationSpec does not have", f)
		}
	}
	if !t.Failed() && !slices.Equal(apiFields, table) {
		t.Errorf("fieldStatuses is not in the API's order:\n got %v\nwant %v", table, apiFields)
	}
}

// sample sets field i of s to a non-zero value of its type.
func sample(t *testing.T, s *api.FelixConfigurationSpec, i int) {
	t.Helper()
	f := reflect.ValueOf(s).Elem().Field(i)
	var fill func(v reflect.Value)
	fill = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			v.Set(reflect.New(v.Type().Elem()))
			fill(v.Elem())
		case reflect.Bool:
			v.SetBool(true)
		case reflect.String:
			v.SetString("Sample")
		case reflect.Int, reflect.Int64, reflect.Uint16, reflect.Uint32:
			if v.Type() == reflect.TypeFor[time.Duration]() {
				v.SetInt(int64(7 * time.Second))
			} else if v.CanInt() {
				v.SetInt(7)
			} else {
				v.SetUint(7)
			}
		case reflect.Slice:
			v.Set(reflect.MakeSlice(v.Type(), 1, 1))
			fill(v.Index(0))
		case reflect.Map:
			v.Set(reflect.MakeMap(v.Type()))
			v.SetMapIndex(reflect.ValueOf("k"), reflect.ValueOf("v"))
		case reflect.Struct:
			for j := range v.NumField() {
				if v.Type().Field(j).IsExported() {
					fill(v.Field(j))
				}
			}
		default:
			t.Fatalf("field %d: cannot fill a %s", i, v.Kind())
		}
	}
	fill(f)
}

// TestUnhonouredEveryField sets each field in turn and checks the report
// against the field's status: honoured and not-applicable fields are
// never reported, ignored ones always, environment-only ones when the
// value came from the datastore, partly honoured ones unless the value is
// a supported one.
func TestUnhonouredEveryField(t *testing.T) {
	idx := jsonIndex()
	for _, fs := range FieldStatuses() {
		t.Run(fs.Field, func(t *testing.T) {
			var s api.FelixConfigurationSpec
			sample(t, &s, idx[fs.Field])
			got := Unhonoured(s, nil)
			val := yamlValue(reflect.ValueOf(s).Field(idx[fs.Field]))
			want := fs.Status == Ignored || fs.Status == EnvOnly ||
				(fs.Status == Partly && !slices.ContainsFunc(fs.Supported, func(v string) bool { return strings.EqualFold(v, val) }))
			if reported := len(got) == 1 && got[0].Field == fs.Field; reported != want || len(got) > 1 {
				t.Fatalf("%s (%s) = %s: findings %v, want reported %v", fs.Field, fs.Status, val, got, want)
			}
			if fs.Status == EnvOnly {
				if got := Unhonoured(s, &s); len(got) != 0 {
					t.Errorf("value from the environment reported: %v", got)
				}
			}
			for _, v := range fs.Supported {
				if v == "" {
					continue // unset
				}
				var spec api.FelixConfigurationSpec
				raw, _ := json.Marshal(map[string]json.RawMessage{fs.Field: quoted(v)})
				if err := json.Unmarshal(raw, &spec); err != nil {
					t.Fatalf("supported value %s=%s does not decode: %v", fs.Field, v, err)
				}
				if got := Unhonoured(spec, nil); len(got) != 0 {
					t.Errorf("supported value %s=%s reported: %v", fs.Field, v, got)
				}
			}
		})
	}
}

// quoted is v as JSON: numbers and booleans bare, anything else a string.
func quoted(v string) json.RawMessage {
	if v == "true" || v == "false" || strings.Trim(v, "0123456789") == "" {
		return json.RawMessage(v)
	}
	b, _ := json.Marshal(v)
	return b
}

// TestUnhonouredExamples: what a user setting these sees reported.
func TestUnhonouredExamples(t *testing.T) {
	tru, fals, port := true, false, 9091
	tests := []struct {
		name      string
		spec, env api.FelixConfigurationSpec
		want      []string
	}{
		{"nothing set", api.FelixConfigurationSpec{}, api.FelixConfigurationSpec{}, nil},
		{"eBPF on", api.FelixConfigurationSpec{BPFEnabled: &tru, BPFLogLevel: "Debug"}, api.FelixConfigurationSpec{},
			[]string{"bpfEnabled=true (no eBPF dataplane)"}},
		{"eBPF off", api.FelixConfigurationSpec{BPFEnabled: &fals}, api.FelixConfigurationSpec{}, nil},
		{"wireguard", api.FelixConfigurationSpec{WireguardEnabled: &tru, WireguardMTU: &port}, api.FelixConfigurationSpec{},
			[]string{"wireguardEnabled=true (no WireGuard)"}},
		{"honoured", api.FelixConfigurationSpec{NATPortRange: &api.Port{MinPort: 1, MaxPort: 2}, PrometheusMetricsEnabled: &tru, PrometheusMetricsPort: &port},
			api.FelixConfigurationSpec{}, nil},
		{"health port from the datastore", api.FelixConfigurationSpec{HealthPort: &port}, api.FelixConfigurationSpec{},
			[]string{"healthPort=9091 (FELIX_HEALTHPORT at start (or --health-addr))"}},
		{"health port from the environment", api.FelixConfigurationSpec{HealthPort: &port}, api.FelixConfigurationSpec{HealthPort: &port}, nil},
		{"reporting off", api.FelixConfigurationSpec{ReportingInterval: &api.Duration{}}, api.FelixConfigurationSpec{}, nil},
		{"reporting on", api.FelixConfigurationSpec{ReportingInterval: &api.Duration{Duration: 30 * time.Second}}, api.FelixConfigurationSpec{},
			[]string{"reportingInterval=30s (no FelixStatus reports are written)"}},
		{"exclusions", api.FelixConfigurationSpec{NATOutgoingExclusions: ptr(api.NATOutgoingExclusionsType("IPPoolsAndHostIPs"))}, api.FelixConfigurationSpec{}, nil},
		{"service loops and filter allow", api.FelixConfigurationSpec{ServiceLoopPrevention: "Reject", IptablesFilterAllowAction: "Return"}, api.FelixConfigurationSpec{}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, f := range Unhonoured(tc.spec, &tc.env) {
				got = append(got, f.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Unhonoured = %q, want %q", got, tc.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestDocsListEveryField: docs/configuration.md's table of fields is
// StatusMarkdown's (go test -update rewrites it).
func TestDocsListEveryField(t *testing.T) {
	const path = "../../docs/configuration.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	begin, end := "<!-- felixconfiguration-fields:begin -->\n", "<!-- felixconfiguration-fields:end -->"
	i, j := strings.Index(string(doc), begin), strings.Index(string(doc), end)
	if i < 0 || j < i {
		t.Fatalf("%s has no %q ... %q section", path, begin, end)
	}
	got, want := string(doc[i+len(begin):j]), StatusMarkdown()
	if got == want {
		return
	}
	if goldentest.Update() {
		out := string(doc[:i+len(begin)]) + want + string(doc[j:])
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's field table is out of date (go test ./agent/felixenv -run TestDocsListEveryField -update):\n%s",
		path, goldentest.Diff(got, want))
}
