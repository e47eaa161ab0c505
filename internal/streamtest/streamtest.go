package streamtest

import (
	"errors"
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

// CheckDecodeInvariants checks what must hold for any input to d's
// decoder: no panic, the same Result however the bytes are cut, memory
// bounded by the input, and a Truncated flag that follows the rules (a
// fuzz target's body).
func CheckDecodeInvariants(t *testing.T, d streaming.Dialect, data []byte, seed uint64) {
	if len(data) > 1<<16 {
		return
	}
	whole, ok := DecodeSplit(t, d, data, seed)
	if !ok {
		return // the Reader refused the input; nothing reached the decoder
	}
	var args int
	for _, tc := range whole.ToolCalls {
		args += len(tc.Arguments)
	}
	if args > len(data) || len(whole.ToolCalls) > len(data) || whole.OutputBytes > int64(len(data)) {
		t.Fatalf("%d argument bytes, %d calls, %d output bytes from %d input bytes", args, len(whole.ToolCalls), whole.OutputBytes, len(data))
	}
	if len(whole.UnparsedErrors) > streaming.MaxUnparsedErrors || len(whole.UnparsedErrors) > whole.Unparsed {
		t.Fatalf("%d unparsed errors kept for %d unparsed", len(whole.UnparsedErrors), whole.Unparsed)
	}
	for _, e := range whole.UnparsedErrors {
		if !errors.Is(e, streaming.ErrInvalidJSON) {
			t.Fatalf("unparsed error %v is not ErrInvalidJSON", e)
		}
	}
	if whole.Truncated == (whole.Done || len(whole.Errors) > 0) {
		t.Fatalf("Truncated = %v with Done = %v and %d errors", whole.Truncated, whole.Done, len(whole.Errors))
	}
}

// CheckDecodeJSONInvariants checks d's decoder of whole bodies: no panic,
// invalid input reported as ErrInvalidJSON, a valid body always done and
// never truncated (a fuzz target's body).
func CheckDecodeJSONInvariants(t *testing.T, d streaming.Dialect, body []byte) {
	res, err := d.DecodeJSON(body)
	if err != nil {
		if !errors.Is(err, streaming.ErrInvalidJSON) || res != nil {
			t.Fatalf("DecodeJSON = %v, %v", res, err)
		}
		return
	}
	if !res.Done || res.Truncated || res.API != d.API() {
		t.Fatalf("Done = %v, Truncated = %v, API = %q", res.Done, res.Truncated, res.API)
	}
	for _, tc := range res.ToolCalls {
		if len(tc.Arguments) > len(body) {
			t.Fatalf("arguments of %d bytes from a %d-byte body", len(tc.Arguments), len(body))
		}
	}
}
