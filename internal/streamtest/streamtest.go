package streamtest

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
)

// Decode feeds chunks in turn to a Reader limited to maxEvent bytes (0:
// the default), decodes every event with a new decoder of d, and returns
// the finished Result and the Reader's error. A Reader that holds more
// than its limit panics.
func Decode(d streaming.Dialect, maxEvent int, chunks [][]byte) (*streaming.Result, error) {
	dec := d.NewDecoder()
	fn := func(ev *sse.Event) error {
		dec.Decode(ev)
		return nil
	}
	r := sse.NewReader(maxEvent)
	limit := maxEvent
	if limit <= 0 {
		limit = sse.DefaultMaxEventSize
	}
	for _, c := range chunks {
		if err := r.Feed(c, fn); err != nil {
			return nil, err
		}
		if r.Buffered() > limit {
			panic(fmt.Sprintf("reader holds %d bytes, over its limit of %d", r.Buffered(), limit))
		}
	}
	if err := r.Finish(fn); err != nil {
		return nil, err
	}
	return dec.Finish(), nil
}

// MustDecode is Decode for a stream the default Reader accepts.
func MustDecode(tb testing.TB, d streaming.Dialect, chunks ...[]byte) *streaming.Result {
	tb.Helper()
	res, err := Decode(d, 0, chunks)
	if err != nil {
		tb.Fatal(err)
	}
	return res
}

// FuzzMaxEvent keeps the Reader's buffer small so that a fuzz run shows
// memory staying bounded by the input, not by what the input claims.
const FuzzMaxEvent = 1 << 16

// DecodeSplit decodes data whole and cut at random points drawn from seed,
// with a Reader limited to FuzzMaxEvent, and fails when the two differ. It
// returns what the whole stream gave; ok is false when the Reader refused
// the input.
func DecodeSplit(t *testing.T, d streaming.Dialect, data []byte, seed uint64) (res *streaming.Result, ok bool) {
	t.Helper()
	res, err := Decode(d, FuzzMaxEvent, fixturetest.Whole(data))
	if err != nil {
		return nil, false
	}
	cut, err := Decode(d, FuzzMaxEvent, fixturetest.RandomSplit(data, rand.New(rand.NewPCG(seed, uint64(len(data))))))
	if err != nil {
		t.Fatalf("the Reader refused the cut stream but not the whole one: %v", err)
	}
	if !reflect.DeepEqual(res, cut) {
		t.Fatalf("result depends on the cuts:\n%+v\n%+v", res, cut)
	}
	return res, true
}

// AddStreamSeeds adds every stream (*.sse) of dir as a seed.
func AddStreamSeeds(f *testing.F, dir string) {
	for i, path := range fixturetest.Glob(f, filepath.Join(dir, "*.sse")) {
		f.Add(fixturetest.ReadFile(f, path), uint64(i))
	}
}

// CheckSplitInvariance decodes data whole, a byte at a time and cut at
// random points drawn from seed: the Result must not depend on how the
// bytes arrived.
func CheckSplitInvariance(t *testing.T, d streaming.Dialect, data []byte, seed uint64) {
	t.Helper()
	want := MustDecode(t, d, data)
	if reflect.DeepEqual(want, &streaming.Result{API: d.API()}) {
		t.Fatal("nothing decoded")
	}
	splits := map[string][][]byte{"byte by byte": fixturetest.BySize(data, 1)}
	rng := rand.New(rand.NewPCG(seed, uint64(len(data))))
	for i := range 8 {
		splits["random "+strconv.Itoa(i)] = fixturetest.RandomSplit(data, rng)
	}
	for how, chunks := range splits {
		got := MustDecode(t, d, chunks...)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: result differs:\n%+v\nwant\n%+v", how, got, want)
		}
	}
}

// CheckCovered fails for every stream of dir that has no golden case.
func CheckCovered(t *testing.T, dir string, covered map[string]bool) {
	t.Helper()
	for _, f := range fixturetest.Glob(t, filepath.Join(dir, "*.sse")) {
		if !covered[filepath.Base(f)] {
			t.Errorf("%s has no golden case", f)
		}
	}
}

// FormatCalls lists calls one a line, for a failure message.
func FormatCalls(calls []streaming.ToolCall) string {
	var b strings.Builder
	for _, c := range calls {
		b.WriteString(strings.Join([]string{
			"  ", c.Type, c.ID, c.Name, string(c.Arguments),
		}, " "))
		if c.Complete {
			b.WriteString(" complete")
		}
		if c.Server {
			b.WriteString(" server")
		}
		b.WriteString("\n")
	}
	return b.String()
}
