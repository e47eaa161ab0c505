package purity

import (
	"path/filepath"
	"strconv"
	"testing"
)

// layers are the adapter-side packages that sit below others: they may do
// I/O, but the packages that use them are never imported back.
func layers(mod string) []struct {
	dir, why string
	rule     rule
	bad      []string // imports the rule must refuse, to show it can fail
} {
	return []struct {
		dir, why string
		rule     rule
		bad      []string
	}{
		{"approvals", "below its adapters: the stores, the admin API and the proxy import it, never the reverse; of the module only config, trajectory and internal/clock, outside the standard library only CEL",
			rule{module: mod, own: []string{mod + "/config", mod + "/internal/clock", mod + "/trajectory"}, extra: []string{"cel.dev/cel-go/"}},
			[]string{mod + "/store/redis", mod + "/proxy", mod + "/admin", "github.com/redis/go-redis/v9"}},
		{"ratelimit", "free of the proxy, its configuration and every other package of the module: it takes plain values, so the proxy depends on it and never the reverse; outside the standard library only go-redis",
			rule{module: mod, extra: []string{"github.com/redis/go-redis/v9"}},
			[]string{mod + "/config", mod + "/proxy", mod + "/trajectory"}},
		{"proxy/relay", "on the standard library alone: the proxy hands it plain values (a response, a body), never the reverse, and what the agent gets of a reply stays the proxy's decision",
			rule{module: mod},
			[]string{mod + "/proxy", mod + "/streaming", "github.com/tidwall/gjson"}},
	}
}

// TestLayers keeps each layer's imports to its rule (see layers).
func TestLayers(t *testing.T) {
	mod := modulePath(t)
	for _, l := range layers(mod) {
		t.Run(l.dir, func(t *testing.T) {
			for _, bad := range l.bad {
				if l.rule.allowed(bad) {
					t.Fatalf("the rule allows %q", bad)
				}
			}
			for file, f := range parseDir(t, filepath.Join(root(), l.dir), false) {
				for _, imp := range f.Imports {
					path, err := strconv.Unquote(imp.Path.Value)
					if err != nil {
						t.Fatal(err)
					}
					if !l.rule.allowed(path) {
						t.Errorf("%s imports %q: %s must stay %s", file, path, l.dir, l.why)
					}
				}
			}
		})
	}
}
