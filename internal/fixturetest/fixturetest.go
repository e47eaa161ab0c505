// Package fixturetest gives tests the recorded real provider streams kept
// beside the checkout (a fixtures directory next to the module root), with
// EXPECTED.json describing what each must decode to. They are read in
// place and never copied into the repository; tests skip when they are
// absent.
package fixturetest

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// Path is where the fixtures are, whether or not they exist: found by
// walking up from the working directory (a package directory under go
// test) to the module root.
func Path() string {
	dir, err := os.Getwd()
	if err != nil {
		return filepath.Join("..", "..", "shared", "fixtures")
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(filepath.Dir(d), "shared", "fixtures")
		}
		if filepath.Dir(d) == d {
			return filepath.Join("..", "..", "shared", "fixtures")
		}
	}
}

// Present reports whether the fixtures are there.
func Present() bool {
	_, err := os.Stat(filepath.Join(Path(), "EXPECTED.json"))
	return err == nil
}

// Expected decodes EXPECTED.json (an object keyed by fixture file name)
// into v, skipping the test when the fixtures are absent and failing it
// when the file is unreadable, malformed or lists nothing.
func Expected(tb testing.TB, v any) {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(Path(), "EXPECTED.json"))
	if errors.Is(err, fs.ErrNotExist) {
		tb.Skipf("no recorded fixtures at %s", Path())
	}
	if err != nil {
		tb.Fatalf("read EXPECTED.json: %v", err)
	}
	var names map[string]json.RawMessage
	if err := json.Unmarshal(b, &names); err != nil {
		tb.Fatalf("parse EXPECTED.json: %v", err)
	}
	if len(names) == 0 {
		tb.Fatal("EXPECTED.json lists no fixtures")
	}
	if err := json.Unmarshal(b, v); err != nil {
		tb.Fatalf("parse EXPECTED.json: %v", err)
	}
}

// Read returns the bytes of one fixture file.
func Read(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(Path(), name))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
