package main

import (
	"context"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"go.yaml.in/yaml/v3"

	"gatekeeper/admin"
	"gatekeeper/config"
	"gatekeeper/store/memory"
)

// The reference-drift tests hold docs/reference to the code: every config
// key, admin route and CLI verb that exists is documented, and everything
// documented exists. The metrics are held to docs/reference/metrics.md in
// the telemetry package, which can reach every instrument.

// repoRoot is the repository, seen from this package's directory.
const repoRoot = "../.."

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// configKeys are the config's keys as dotted paths, list levels left out
// ("providers.keys.rpm" for providers[].keys[].rpm), from the yaml tags of
// config.Config. leaf says whether the key holds a value rather than keys
// of its own; a map of values (rate_limits.weights) is a leaf whose keys
// are the operator's, and a map of blocks (prices) has the block's keys
// directly under it.
func configKeys() (keys map[string]bool, valueMaps map[string]bool) {
	keys, valueMaps = map[string]bool{}, map[string]bool{}
	unmarshaler := reflect.TypeFor[yaml.Unmarshaler]()
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			key := prefix + name
			ft := f.Type
			for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
				ft = ft.Elem()
			}
			isMap := ft.Kind() == reflect.Map
			if isMap {
				ft = ft.Elem()
			}
			block := ft.Kind() == reflect.Struct && !reflect.PointerTo(ft).Implements(unmarshaler)
			keys[key] = !block
			if isMap && !block {
				valueMaps[key] = true
			}
			if block {
				walk(ft, key+".")
			}
		}
	}
	walk(reflect.TypeFor[config.Config](), "")
	return keys, valueMaps
}

var (
	tableRow  = regexp.MustCompile("^\\| (`[^|]*`) \\| (.*) \\|$")
	codeSpan  = regexp.MustCompile("`([^`]*)`")
	fieldName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
)

// documentedConfigKeys reads the table of docs/reference/configuration.md:
// the keys its rows name (`a.b`, and `.c` for a.c after it), and, for a
// row naming a block, the keys of the first {...} or [{...}] its meaning
// shows, nested blocks included.
func documentedConfigKeys(t *testing.T, doc string) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	for _, line := range strings.Split(doc, "\n") {
		m := tableRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var names []string
		parent := ""
		for _, span := range codeSpan.FindAllStringSubmatch(m[1], -1) {
			name := strings.ReplaceAll(span[1], "[]", "")
			if strings.HasPrefix(name, ".") {
				name = parent + name
			} else if i := strings.LastIndex(name, "."); i >= 0 {
				parent = name[:i]
			}
			names = append(names, name)
			got[name] = true
		}
		if len(names) != 1 {
			continue
		}
		for _, span := range codeSpan.FindAllStringSubmatch(m[2], -1) {
			v := span[1]
			if strings.HasPrefix(v, "[{") && strings.HasSuffix(v, "}]") {
				v = v[1 : len(v)-1]
			}
			if strings.HasPrefix(v, "{") && strings.HasSuffix(v, "}") {
				if err := blockKeys(v[1:len(v)-1], names[0]+".", got); err != nil {
					t.Errorf("configuration.md, row %s: %v", names[0], err)
				}
				break
			}
		}
	}
	return got
}

// blockKeys adds the keys of a block's listing "a, b?, c: {d, e}, f: [{g}]"
// under prefix.
func blockKeys(list, prefix string, into map[string]bool) error {
	depth, start := 0, 0
	var items []string
	for i, r := range list {
		switch r {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			if depth == 0 {
				items = append(items, list[start:i])
				start = i + 1
			}
		}
	}
	items = append(items, list[start:])
	for _, item := range items {
		name, value, _ := strings.Cut(strings.TrimSpace(item), ":")
		name = strings.TrimSuffix(strings.TrimSpace(name), "?")
		if !fieldName.MatchString(name) {
			return &docError{"not a key: " + item}
		}
		into[prefix+name] = true
		value = strings.TrimSpace(value)
		if strings.HasPrefix(value, "[{") && strings.HasSuffix(value, "}]") {
			value = value[1 : len(value)-1]
		}
		if strings.HasPrefix(value, "{") && strings.HasSuffix(value, "}") {
			if err := blockKeys(value[1:len(value)-1], prefix+name+".", into); err != nil {
				return err
			}
		}
	}
	return nil
}

type docError struct{ msg string }

func (e *docError) Error() string { return e.msg }

func TestConfigReferenceMatchesConfig(t *testing.T) {
	keys, valueMaps := configKeys()
	documented := documentedConfigKeys(t, readDoc(t, "docs/reference/configuration.md"))
	if len(keys) < 100 || len(documented) < 100 {
		t.Fatalf("read %d keys from config.Config and %d from the reference: the walk or the table's form changed", len(keys), len(documented))
	}
	for key, leaf := range keys {
		if leaf && !documented[key] {
			t.Errorf("config key %s is not in docs/reference/configuration.md", key)
		}
	}
	for key := range documented {
		if _, ok := keys[key]; ok {
			continue
		}
		if i := strings.LastIndex(key, "."); i >= 0 && valueMaps[key[:i]] {
			continue // a documented key of a map the operator fills (rate_limits.weights.batch)
		}
		t.Errorf("docs/reference/configuration.md documents %s, which config.Config does not have", key)
	}
}

// documentedRoute is METHOD /admin/v1/... as docs/reference/admin-api.md
// writes a route.
var documentedRoute = regexp.MustCompile("`(GET|POST|PUT|PATCH|DELETE) (/admin/v1/[^`?\\s]*)[^`]*`")

// samplePath turns a documented path into ones the router can match: each
// {name} a sample segment, each {a,b,c} one path per choice.
func samplePaths(p string) []string {
	i := strings.Index(p, "{")
	if i < 0 {
		return []string{p}
	}
	j := strings.Index(p[i:], "}") + i
	choices := []string{"run-42"}
	if inner := p[i+1 : j]; strings.Contains(inner, ",") {
		choices = strings.Split(inner, ",")
	}
	var out []string
	for _, c := range choices {
		out = append(out, samplePaths(p[:i]+c+p[j+1:])...)
	}
	return out
}

func TestAdminAPIReferenceMatchesRouter(t *testing.T) {
	r := chi.NewRouter()
	admin.New(config.DefaultConfig(), nil, nil, nil, admin.WithReloader(&server{}), admin.WithSpendLimits(memory.NewSpendLimits())).Routes(r)
	routes := map[string]bool{} // "METHOD pattern" the router serves
	if err := chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routes[method+" "+route] = false
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(routes) < 10 {
		t.Fatalf("walked %d admin routes", len(routes))
	}
	doc := readDoc(t, "docs/reference/admin-api.md")
	documented := documentedRoute.FindAllStringSubmatch(doc, -1)
	if len(documented) < 10 {
		t.Fatalf("found %d routes in docs/reference/admin-api.md", len(documented))
	}
	for _, m := range documented {
		for _, p := range samplePaths(m[2]) {
			rctx := chi.NewRouteContext()
			if !r.Match(rctx, m[1], p) {
				t.Errorf("docs/reference/admin-api.md documents %s %s, which the admin router does not serve", m[1], m[2])
				continue
			}
			routes[m[1]+" "+rctx.RoutePattern()] = true
		}
	}
	for route, seen := range routes {
		if !seen {
			t.Errorf("admin route %s is not in docs/reference/admin-api.md", route)
		}
	}
}

// cliHeading is a command's section in docs/reference/cli.md.
var cliHeading = regexp.MustCompile("(?m)^## `gatekeeper ([a-z-]+)`$")

func TestCLIReferenceMatchesCommands(t *testing.T) {
	doc := readDoc(t, "docs/reference/cli.md")
	headings := map[string]bool{}
	for _, m := range cliHeading.FindAllStringSubmatch(doc, -1) {
		headings[m[1]] = true
	}
	// The verbs the reference's command lines show: "gatekeeper approvals
	// approve ID" and "gatekeeper trajectories pause|resume ID".
	shown := map[string]map[string]bool{}
	inCode := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
			continue
		}
		f := strings.Fields(line)
		if !inCode || len(f) < 3 || f[0] != "gatekeeper" || strings.HasPrefix(f[2], "-") || strings.HasPrefix(f[2], "[") {
			continue
		}
		if shown[f[1]] == nil {
			shown[f[1]] = map[string]bool{}
		}
		for v := range strings.SplitSeq(f[2], "|") {
			shown[f[1]][v] = true
		}
	}
	names := map[string]bool{}
	for _, c := range commands {
		names[c.name] = true
		if !headings[c.name] {
			t.Errorf("command %s has no section \"## `gatekeeper %s`\" in docs/reference/cli.md", c.name, c.name)
		}
		for _, v := range c.verbs {
			if !shown[c.name][v] {
				t.Errorf("verb %s %s is not shown in docs/reference/cli.md", c.name, v)
			}
		}
		for v := range shown[c.name] {
			if len(c.verbs) > 0 && !slices.Contains(c.verbs, v) {
				t.Errorf("docs/reference/cli.md shows verb %s %s, which the command does not take", c.name, v)
			}
		}
	}
	for h := range headings {
		if !names[h] {
			t.Errorf("docs/reference/cli.md documents command %s, which the CLI does not have", h)
		}
	}
	for c := range shown {
		if !names[c] {
			t.Errorf("docs/reference/cli.md shows command %s, which the CLI does not have", c)
		}
	}
	// The table is what run dispatches: an unknown verb is refused there.
	for _, c := range commands {
		if len(c.verbs) == 0 {
			continue
		}
		err := run(context.Background(), []string{c.name, "no-such-verb"}, env(), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "unknown verb") {
			t.Errorf("%s no-such-verb: %v", c.name, err)
		}
	}
}

var (
	mdLink  = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`^#{1,6} (.+)$`)
)

// anchors are the ids a Markdown renderer gives a file's headings:
// lowercased, punctuation dropped, spaces as hyphens, a repeat numbered.
func anchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inCode := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		m := heading.FindStringSubmatch(line)
		if inCode || m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 0x7f:
				b.WriteRune(r)
			}
		}
		id := b.String()
		if n := seen[id]; n > 0 {
			out[id+"-"+strconv.Itoa(n)] = true
		} else {
			out[id] = true
		}
		seen[id]++
	}
	return out
}

// TestDocLinks: every relative link in the repository's Markdown names a
// file that exists and, with a #fragment, a heading of it.
func TestDocLinks(t *testing.T) {
	var files []string
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("found %d Markdown files", len(files))
	}
	links := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		inCode := false
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "```") {
				inCode = !inCode
			}
			if inCode {
				continue
			}
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				name, fragment, _ := strings.Cut(target, "#")
				dest := file
				if name != "" {
					dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path.Clean(name)))
				}
				rel, _ := filepath.Rel(repoRoot, file)
				db, err := os.ReadFile(dest)
				if err != nil {
					t.Errorf("%s: link %s: %v", rel, target, err)
					continue
				}
				if fragment != "" && strings.HasSuffix(dest, ".md") && !anchors(string(db))[fragment] {
					t.Errorf("%s: link %s: no heading #%s there", rel, target, fragment)
				}
			}
		}
	}
	if links < 50 {
		t.Errorf("checked %d links", links)
	}
}

// TestReadmeIsAFrontDoor: README.md stays short, the rest lives in docs/.
func TestReadmeIsAFrontDoor(t *testing.T) {
	if n := strings.Count(readDoc(t, "README.md"), "\n"); n > 250 {
		t.Errorf("README.md has %d lines; keep it at most 250 and move the rest into docs/", n)
	}
}
