package trajectory

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The pure packages (this one and streaming) import only the standard
// library, streaming also the tidwall JSON readers. Nothing in them may
// import the rest of gatekeeper: adapters depend on them, never the reverse.

// pureRule says which imports a pure package may have.
type pureRule struct {
	module string   // this module's path; its packages are forbidden
	extra  []string // allowed non-standard prefixes
	banned []string // standard packages that do I/O or hold process state
}

func (p pureRule) allowed(path string) bool {
	if path == p.module || strings.HasPrefix(path, p.module+"/") {
		return false
	}
	for _, b := range p.banned {
		if path == b || strings.HasPrefix(path, b+"/") {
			return false
		}
	}
	first, _, _ := strings.Cut(path, "/")
	if !strings.Contains(first, ".") {
		return true
	}
	for _, e := range p.extra {
		if strings.HasPrefix(path, e) {
			return true
		}
	}
	return false
}

func modulePath(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.TrimSpace(rest)
		}
	}
	t.Fatal("no module line in go.mod")
	return ""
}

// parseDir parses the .go files of dir, test files only when withTests.
func parseDir(t *testing.T, dir string, withTests bool) map[string]*ast.File {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*ast.File{}
	fset := token.NewFileSet()
	for _, name := range names {
		if !withTests && strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
	}
	if len(files) == 0 {
		t.Fatalf("no Go files in %s", dir)
	}
	return files
}

func TestPureImports(t *testing.T) {
	mod := modulePath(t)
	ioPkgs := []string{"os", "net", "syscall", "io/fs", "io/ioutil", "database", "log", "math/rand", "crypto/rand", "plugin", "unsafe"}
	tests := []struct {
		name      string
		dir       string
		withTests bool
		rule      pureRule
	}{
		{"trajectory code", ".", false, pureRule{module: mod, banned: ioPkgs}},
		{"trajectory tests", ".", true, pureRule{module: mod}},
		{"streaming code", filepath.Join("..", "streaming"), false, pureRule{module: mod, extra: []string{"github.com/tidwall/"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for name, f := range parseDir(t, tc.dir, tc.withTests) {
				for _, imp := range f.Imports {
					path, err := strconv.Unquote(imp.Path.Value)
					if err != nil {
						t.Fatal(err)
					}
					if !tc.rule.allowed(path) {
						t.Errorf("%s imports %q", name, path)
					}
				}
			}
		})
	}
}

// TestPureRule shows the check above can fail.
func TestPureRule(t *testing.T) {
	traj := pureRule{module: "gatekeeper", banned: []string{"os", "net"}}
	stream := pureRule{module: "gatekeeper", extra: []string{"github.com/tidwall/"}}
	tests := []struct {
		name string
		rule pureRule
		path string
		want bool
	}{
		{"standard library", traj, "encoding/json", true},
		{"own module", traj, "gatekeeper/streaming", false},
		{"module root", traj, "gatekeeper", false},
		{"redis client", traj, "github.com/redis/go-redis/v9", false},
		{"tidwall outside streaming", traj, "github.com/tidwall/gjson", false},
		{"tidwall in streaming", stream, "github.com/tidwall/gjson", true},
		{"other module in streaming", stream, "github.com/go-chi/chi/v5", false},
		{"banned I/O", traj, "net/http", false},
		{"banned exact", traj, "os", false},
		{"prefix look-alike", traj, "osx", true},
		{"x/ packages are not standard", traj, "golang.org/x/sync", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.rule.allowed(tc.path); got != tc.want {
				t.Errorf("allowed(%q) = %v, want %v", tc.path, got, tc.want)
			}
		})
	}
}

// TestNoPackageState: the only package-level variables allowed in this
// package's code are sentinel errors, so nothing holds state between calls.
func TestNoPackageState(t *testing.T) {
	for name, f := range parseDir(t, ".", false) {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i >= len(vs.Values) || !isErrorsNew(vs.Values[i]) {
						t.Errorf("%s: package-level var %s is not a sentinel error", name, n.Name)
					}
				}
			}
		}
	}
}

func isErrorsNew(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "errors" && sel.Sel.Name == "New"
}
