package meter

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// meter is pure: it may import the standard library minus what does I/O or
// holds process state, the trajectory types it meters and the YAML reader of
// its embedded price file. Adapters depend on it, never the reverse.

var bannedStd = []string{"os", "net", "syscall", "io/fs", "io/ioutil", "database", "log", "math/rand", "crypto/rand", "plugin", "unsafe", "time/tzdata"}

var allowedModule = []string{"gatekeeper/trajectory", "go.yaml.in/yaml/v3"}

// allowedImport applies the rule above to one import path.
func allowedImport(path string) bool {
	for _, a := range allowedModule {
		if path == a {
			return true
		}
	}
	for _, b := range bannedStd {
		if path == b || strings.HasPrefix(path, b+"/") {
			return false
		}
	}
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".") && first != "gatekeeper"
}

func TestAllowedImport(t *testing.T) {
	tests := []struct {
		path string
		want bool
	}{
		{"math", true},
		{"embed", true},
		{"gatekeeper/trajectory", true},
		{"go.yaml.in/yaml/v3", true},
		{"gatekeeper/config", false},
		{"gatekeeper/store/memory", false},
		{"gatekeeper", false},
		{"os", false},
		{"net/http", false},
		{"github.com/redis/go-redis/v9", false},
		{"go.yaml.in/yaml/v4", false},
		{"osx", true},
	}
	for _, tc := range tests {
		if got := allowedImport(tc.path); got != tc.want {
			t.Errorf("allowedImport(%q) = %v, want %v", tc.path, got, tc.want)
		}
	}
}

func parseCode(t *testing.T) map[string]*ast.File {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*ast.File{}
	fset := token.NewFileSet()
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
	}
	if len(files) == 0 {
		t.Fatal("no Go files")
	}
	return files
}

func TestPureImports(t *testing.T) {
	for name, f := range parseCode(t) {
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			if !allowedImport(path) {
				t.Errorf("%s imports %q", name, path)
			}
		}
	}
}

// TestNoPackageState: package-level variables are sentinel errors or the
// embedded price file, so nothing holds state between calls.
func TestNoPackageState(t *testing.T) {
	for name, f := range parseCode(t) {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			embedded := false
			if gd.Doc != nil {
				for _, c := range gd.Doc.List {
					embedded = embedded || strings.HasPrefix(c.Text, "//go:embed ")
				}
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					sentinel := i < len(vs.Values) && isErrorsNew(vs.Values[i])
					if !sentinel && !(embedded && len(vs.Values) == 0) {
						t.Errorf("%s: package-level var %s is neither a sentinel error nor embedded data", name, n.Name)
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
