package purity

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// ioStd are standard packages that do I/O or hold process state.
var ioStd = []string{"os", "net", "syscall", "io/fs", "io/ioutil", "database", "log", "math/rand", "crypto/rand", "plugin", "unsafe", "time/tzdata"}

// rule says which imports a pure package may have: the standard library
// less banned, the listed packages of this module, and the listed
// prefixes of other modules. Adapters depend on pure packages, never the
// reverse.
type rule struct {
	module string   // this module's path
	own    []string // packages of this module allowed
	extra  []string // allowed non-standard prefixes
	banned []string
}

func (p rule) allowed(path string) bool {
	for _, o := range p.own {
		if path == o {
			return true
		}
	}
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

// pure lists the pure packages, relative to the module root, and their rules.
func pure(mod string) []struct {
	dir       string
	withTests bool
	rule      rule
} {
	// The streaming tree: the dialect packages see the vocabulary, the SSE
	// reader and the shared internals, never one another; the scanner alone
	// reads strings in place (unsafe.String over a byte slice).
	scan := mod + "/streaming/internal/jsonscan"
	items := mod + "/streaming/internal/callitems"
	engine := mod + "/streaming/internal/callfilter"
	reshape := mod + "/streaming/internal/reshape"
	request := mod + "/streaming/internal/request"
	dialect := []string{mod + "/streaming", mod + "/streaming/sse", scan, items, mod + "/streaming/internal/openai", engine, reshape, request}
	jsonLibs := []string{"github.com/tidwall/", "github.com/cespare/xxhash/v2"}
	noUnsafe := slices.DeleteFunc(slices.Clone(ioStd), func(p string) bool { return p == "unsafe" })
	return []struct {
		dir       string
		withTests bool
		rule      rule
	}{
		{"trajectory", false, rule{module: mod, banned: ioStd}},
		{"trajectory", true, rule{module: mod}},
		{"streaming", false, rule{module: mod, own: []string{mod + "/streaming/sse", scan, items}, extra: jsonLibs}},
		{"streaming/sse", false, rule{module: mod, banned: ioStd}},
		{"streaming/internal/jsonscan", false, rule{module: mod, extra: jsonLibs, banned: noUnsafe}},
		{"streaming/internal/callitems", false, rule{module: mod, own: []string{scan}, extra: jsonLibs, banned: ioStd}},
		{"streaming/internal/openai", false, rule{module: mod, own: []string{mod + "/streaming", mod + "/streaming/sse", scan}, extra: jsonLibs, banned: ioStd}},
		{"streaming/internal/callfilter", false, rule{module: mod, own: []string{mod + "/streaming", mod + "/streaming/sse", scan, reshape}, extra: jsonLibs, banned: ioStd}},
		{"streaming/internal/reshape", false, rule{module: mod, own: []string{mod + "/streaming", mod + "/streaming/sse", scan}, extra: jsonLibs, banned: ioStd}},
		{"streaming/internal/request", false, rule{module: mod, own: []string{mod + "/streaming", scan, reshape}, extra: jsonLibs, banned: ioStd}},
		{"streaming/anthropic", false, rule{module: mod, own: dialect, extra: jsonLibs, banned: ioStd}},
		{"streaming/chat", false, rule{module: mod, own: dialect, extra: jsonLibs, banned: ioStd}},
		{"streaming/responses", false, rule{module: mod, own: dialect, extra: jsonLibs, banned: ioStd}},
		{"streaming/gemini", false, rule{module: mod, own: dialect, extra: jsonLibs, banned: ioStd}},
		{"tenant", false, rule{module: mod, banned: ioStd}},
		{"meter", false, rule{module: mod, own: []string{mod + "/trajectory"}, extra: []string{"go.yaml.in/yaml/v3"}, banned: ioStd}},
		{"report", false, rule{module: mod, banned: ioStd}},
	}
}

func root() string { return filepath.Join("..", "..") }

func modulePath(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(), "go.mod"))
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
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	for _, name := range names {
		if !withTests && strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
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
	for _, p := range pure(mod) {
		name := p.dir + " code"
		if p.withTests {
			name = p.dir + " tests"
		}
		t.Run(name, func(t *testing.T) {
			for file, f := range parseDir(t, filepath.Join(root(), p.dir), p.withTests) {
				for _, imp := range f.Imports {
					path, err := strconv.Unquote(imp.Path.Value)
					if err != nil {
						t.Fatal(err)
					}
					if !p.rule.allowed(path) {
						t.Errorf("%s imports %q", file, path)
					}
				}
			}
		})
	}
}

// TestRule shows the check above can fail.
func TestRule(t *testing.T) {
	traj := rule{module: "gatekeeper", banned: []string{"os", "net"}}
	stream := rule{module: "gatekeeper", extra: []string{"github.com/tidwall/"}}
	meter := rule{module: "gatekeeper", own: []string{"gatekeeper/trajectory"}, extra: []string{"go.yaml.in/yaml/v3"}, banned: ioStd}
	dialect := rule{module: "gatekeeper", own: []string{"gatekeeper/streaming", "gatekeeper/streaming/sse", "gatekeeper/streaming/internal/jsonscan"}, banned: ioStd}
	tests := []struct {
		name string
		rule rule
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
		{"meter: trajectory types", meter, "gatekeeper/trajectory", true},
		{"meter: embed", meter, "embed", true},
		{"meter: its YAML reader", meter, "go.yaml.in/yaml/v3", true},
		{"meter: another YAML major", meter, "go.yaml.in/yaml/v4", false},
		{"meter: config", meter, "gatekeeper/config", false},
		{"meter: an adapter", meter, "gatekeeper/store/memory", false},
		{"dialect: the vocabulary", dialect, "gatekeeper/streaming", true},
		{"dialect: the scanner", dialect, "gatekeeper/streaming/internal/jsonscan", true},
		{"dialect: another dialect", dialect, "gatekeeper/streaming/chat", false},
		{"dialect: the proxy", dialect, "gatekeeper/proxy", false},
		{"dialect: I/O", dialect, "os", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.rule.allowed(tc.path); got != tc.want {
				t.Errorf("allowed(%q) = %v, want %v", tc.path, got, tc.want)
			}
		})
	}
}

// TestNoPackageState: package-level variables of trajectory, meter and report code
// are sentinel errors, or meter's embedded price file, so nothing holds
// state between calls.
func TestNoPackageState(t *testing.T) {
	for _, dir := range []string{"trajectory", "meter", "report"} {
		t.Run(dir, func(t *testing.T) {
			for name, f := range parseDir(t, filepath.Join(root(), dir), false) {
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
		})
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

// TestStreamingTreeListed: every package under streaming/ has its rule in
// pure, so a new one cannot escape the check.
func TestStreamingTreeListed(t *testing.T) {
	listed := map[string]bool{}
	for _, p := range pure(modulePath(t)) {
		listed[filepath.ToSlash(p.dir)] = true
	}
	err := filepath.WalkDir(filepath.Join(root(), "streaming"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if d.Name() == "testdata" {
			return filepath.SkipDir
		}
		code, _ := filepath.Glob(filepath.Join(path, "*.go"))
		code = slices.DeleteFunc(code, func(name string) bool { return strings.HasSuffix(name, "_test.go") })
		rel, err := filepath.Rel(root(), path)
		if err != nil {
			return err
		}
		if len(code) > 0 && !listed[filepath.ToSlash(rel)] {
			t.Errorf("package %s has no purity rule", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
