package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/projectcalico/calico-node/internal/testkit/testbin"
)

// TestPoolCIDRParsedOnlyHere: no shipped (non-test) file outside this
// package hands an IPPool's spec.cidr to a CIDR parser; every consumer
// reads pools through ParsePool or ParsePools, so that a pool with a bad
// CIDR is left out (and logged) alike everywhere.
//
// The check is syntactic: it flags netip.ParsePrefix, netip.MustParsePrefix
// and net.ParseCIDR called on X.Spec.CIDR, or on s.CIDR where s was
// assigned from X.Spec (or &X.Spec) in the same function. Other CIDRs
// (IPAM blocks, BGP filters, env vars) do not come from a .Spec field.
func TestPoolCIDRParsedOnlyHere(t *testing.T) {
	root := testbin.RepoRoot()
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == filepath.Join("internal", "model", "api") || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, pos := range poolCIDRParses(f) {
			p := fset.Position(pos)
			t.Errorf("%s:%d parses an IPPool's cidr itself: use api.ParsePool or api.ParsePools", rel, p.Line)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestPoolCIDRParsesFinds: the check above finds the shapes it claims to.
func TestPoolCIDRParsesFinds(t *testing.T) {
	src := `package x
func a(p *api.IPPool) { netip.ParsePrefix(p.Spec.CIDR) }
func b(p api.IPPool) { s := &p.Spec; _, _, _ = net.ParseCIDR(s.CIDR) }
func c(p api.IPPool) { var s = p.Spec; netip.MustParsePrefix(s.CIDR) }
func d(b blockSpec) { netip.ParsePrefix(b.CIDR) }
func e(p api.IPPool) { log.Info("pool", "cidr", p.Spec.CIDR) }
`
	f, err := parser.ParseFile(token.NewFileSet(), "x.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(poolCIDRParses(f)); got != 3 {
		t.Errorf("found %d pool CIDR parses, want 3 (a, b, c)", got)
	}
}

// poolCIDRParses returns where f calls a CIDR parser on a .Spec's CIDR.
func poolCIDRParses(f *ast.File) []token.Pos {
	var out []token.Pos
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		specs := map[string]bool{} // names assigned from X.Spec or &X.Spec
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				for i, rhs := range n.Rhs {
					if id, ok := n.Lhs[min(i, len(n.Lhs)-1)].(*ast.Ident); ok && isSpec(rhs) {
						specs[id.Name] = true
					}
				}
			case *ast.ValueSpec:
				for i, v := range n.Values {
					if i < len(n.Names) && isSpec(v) {
						specs[n.Names[i].Name] = true
					}
				}
			case *ast.CallExpr:
				if isCIDRParser(n.Fun) && len(n.Args) == 1 && isPoolCIDR(n.Args[0], specs) {
					out = append(out, n.Pos())
				}
			}
			return true
		})
	}
	return out
}

func isSpec(e ast.Expr) bool {
	if u, ok := e.(*ast.UnaryExpr); ok && u.Op == token.AND {
		e = u.X
	}
	sel, ok := e.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "Spec"
}

func isPoolCIDR(e ast.Expr, specs map[string]bool) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "CIDR" {
		return false
	}
	if id, ok := sel.X.(*ast.Ident); ok {
		return specs[id.Name]
	}
	return isSpec(sel.X)
}

func isCIDRParser(fun ast.Expr) bool {
	sel, ok := fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	if !ok {
		return false
	}
	switch pkg.Name + "." + sel.Sel.Name {
	case "netip.ParsePrefix", "netip.MustParsePrefix", "net.ParseCIDR":
		return true
	}
	return false
}
