package fixturetest

import (
	"path/filepath"
	"testing"
)

func TestPathIsBesideModuleRoot(t *testing.T) {
	p := Path()
	if filepath.Base(p) != "fixtures" || filepath.Base(filepath.Dir(p)) != "shared" {
		t.Fatalf("Path() = %s", p)
	}
	// From internal/fixturetest the module root is two levels up.
	want, _ := filepath.Abs(filepath.Join("..", "..", "..", "shared", "fixtures"))
	if p != want {
		t.Fatalf("Path() = %s, want %s", p, want)
	}
}

func TestExpected(t *testing.T) {
	var m map[string]struct {
		API string `json:"api"`
	}
	Expected(t, &m) // skips when absent
	for name, e := range m {
		if e.API == "" {
			t.Errorf("%s has no api", name)
		}
		if len(Read(t, name)) == 0 {
			t.Errorf("%s is empty", name)
		}
	}
}
