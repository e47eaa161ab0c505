package streaming_test

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
)

// TestHoldKeepsProviderOrder: every recorded turn reply, fed through a
// call filter with Hold and every call allowed in many read splittings,
// reaches the client as a prefix of the provider's bytes after every read,
// and as the provider's bytes at the end. A held call holds what follows
// it too: nothing overtakes it.
func TestHoldKeepsProviderOrder(t *testing.T) {
	if !fixturetest.Present() {
		t.Skip("no recorded fixtures")
	}
	expected := loadExpected(t)
	ran := 0
	for _, name := range slices.Sorted(maps.Keys(expected)) {
		api, ok := expected[name].decoderAPI()
		if !ok {
			continue // Gemini is not a turn API
		}
		ran++
		in := fixturetest.Read(t, name)
		t.Run(name, func(t *testing.T) {
			splits := map[string][][]byte{"whole": fixturetest.Whole(in)}
			for _, n := range []int{1, 3, 17, 256} {
				splits[fmt.Sprintf("by%d", n)] = fixturetest.BySize(in, n)
			}
			for seed := range uint64(8) {
				splits[fmt.Sprintf("random%d", seed)] = fixturetest.RandomSplit(in, rand.New(rand.NewPCG(seed, 11)))
			}
			for _, split := range slices.Sorted(maps.Keys(splits)) {
				f := newHoldFilter(t, api, allowAll)
				if out := feedPrefixes(t, f, in, splits[split]); !bytes.Equal(out, in) {
					t.Fatalf("%s: the client got %d bytes that are not the provider's %d", split, len(out), len(in))
				}
			}
		})
	}
	if ran < 31 {
		t.Errorf("ran %d turn fixtures, want 31", ran)
	}
}

// feedPrefixes runs the reads through f and fails as soon as what the
// client received is not a prefix of in.
func feedPrefixes(t *testing.T, f *streaming.CallFilter, in []byte, reads [][]byte) []byte {
	t.Helper()
	var out []byte
	fn := func(ev *sse.Event) error {
		out = f.AppendEvent(out, *ev)
		return nil
	}
	r := sse.NewReader(0)
	for i, b := range reads {
		if err := r.Feed(b, fn); err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(in, out) {
			t.Fatalf("after read %d of %d the client's %d bytes are not a prefix of the provider's", i+1, len(reads), len(out))
		}
	}
	if err := r.Finish(fn); err != nil {
		t.Fatal(err)
	}
	return out
}
