package selector

import (
	"fmt"
	"testing"
)

func BenchmarkEvaluate(b *testing.B) {
	lbls := map[string]string{
		"app":                            "web",
		"tier":                           "frontend",
		"env":                            "prod",
		"version":                        "v1.2.3",
		"projectcalico.org/namespace":    "shop",
		"projectcalico.org/orchestrator": "k8s",
		"pod-template-hash":              "7d9f8c6b5",
	}
	for _, sel := range []string{
		`app == "web"`,
		`app == "web" && tier in {"frontend", "backend"} && !has(canary)`,
		`projectcalico.org/namespace == "shop" && (env == "prod" || env == "staging") && version starts with "v1."`,
		`a in {"1","2","3","4","5","6","7","8","9","10","11","12"} || app not in {"db", "cache"}`,
	} {
		s := MustParse(sel)
		b.Run(fmt.Sprintf("%.40s", sel), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !s.Evaluate(lbls) {
					b.Fatal("should match")
				}
			}
		})
	}
}

func BenchmarkParse(b *testing.B) {
	const sel = `projectcalico.org/namespace == "shop" && (env == "prod" || env == "staging") && tier in {"a", "b", "c"} && !has(canary)`
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(sel); err != nil {
			b.Fatal(err)
		}
	}
}
