package fixturetest

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// ReadFile returns the contents of the file at the joined path.
func ReadFile(tb testing.TB, elem ...string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(elem...))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// Glob returns the files matching pattern, failing when none does.
func Glob(tb testing.TB, pattern string) []string {
	tb.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		tb.Fatalf("no files match %s: %v", pattern, err)
	}
	return files
}

// The ways a stream arrives in reads, for tests whose result must not
// depend on them.

// Whole is in as one read.
func Whole(in []byte) [][]byte { return [][]byte{in} }

// BySize cuts in into reads of n bytes (the last one shorter).
func BySize(in []byte, n int) [][]byte {
	var out [][]byte
	for len(in) > n {
		out = append(out, in[:n:n])
		in = in[n:]
	}
	return append(out, in)
}

// RandomSplit cuts in at random points, mostly close together with now and
// then a long piece, the way network reads come.
func RandomSplit(in []byte, rng *rand.Rand) [][]byte {
	var out [][]byte
	for len(in) > 0 {
		n := 1 + rng.IntN(16)
		switch rng.IntN(8) {
		case 0:
			n = 1 + rng.IntN(4096)
		case 1:
			n = 0 // an empty Feed must be harmless
		}
		n = min(n, len(in))
		out = append(out, in[:n:n])
		in = in[n:]
	}
	return out
}
