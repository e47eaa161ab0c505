package purity

import (
	"path/filepath"
	"strconv"
	"testing"
)

// TestApprovalsLayer keeps the approvals package below its adapters: the
// stores, the admin API and the proxy import it, never the reverse. Within
// the module it may import config, trajectory and internal/clock; outside
// the standard library, only CEL.
func TestApprovalsLayer(t *testing.T) {
	mod := modulePath(t)
	r := rule{module: mod, own: []string{mod + "/config", mod + "/internal/clock", mod + "/trajectory"}, extra: []string{"cel.dev/cel-go/"}}
	for _, bad := range []string{mod + "/store/redis", mod + "/proxy", mod + "/admin", "github.com/redis/go-redis/v9"} {
		if r.allowed(bad) {
			t.Fatalf("the rule allows %q", bad)
		}
	}
	for file, f := range parseDir(t, filepath.Join(root(), "approvals"), false) {
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			if !r.allowed(path) {
				t.Errorf("%s imports %q", file, path)
			}
		}
	}
}
