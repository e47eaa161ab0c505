package streaming_test

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/streaming/sse"
)

// Feeding streams to a Reader and a decoder, in the pieces a network may
// cut them into.

// decoderTestdata is where each decoder's golden streams live.
var decoderTestdata = map[API]string{
	APIAnthropic: anthropicTestdata,
	APIChat:      "testdata/chat",
	APIResponses: "testdata/responses",
}

// decodeStream feeds chunks in turn to a Reader limited to maxEvent bytes
// (0: the default), decodes every event with a new decoder of api, and
// returns the finished Result, a copy of every Part emitted and the
// Reader's error. A Reader that holds more than its limit panics.
func decodeStream(api API, maxEvent int, chunks [][]byte) (*Result, []Part, error) {
	dec, err := NewDecoder(api)
	if err != nil {
		return nil, nil, err
	}
	var parts []Part
	emit := func(p *Part) { parts = append(parts, clonePart(p)) }
	fn := func(ev *sse.Event) error {
		dec.Decode(ev, emit)
		return nil
	}
	r := sse.NewReader(maxEvent)
	limit := maxEvent
	if limit <= 0 {
		limit = sse.DefaultMaxEventSize
	}
	for _, c := range chunks {
		if err := r.Feed(c, fn); err != nil {
			return nil, nil, err
		}
		if r.Buffered() > limit {
			panic(fmt.Sprintf("reader holds %d bytes, over its limit of %d", r.Buffered(), limit))
		}
	}
	if err := r.Finish(fn); err != nil {
		return nil, nil, err
	}
	return dec.Finish(), parts, nil
}

// mustDecode is decodeStream for a stream the default Reader accepts.
func mustDecode(tb testing.TB, api API, chunks ...[]byte) (*Result, []Part) {
	tb.Helper()
	res, parts, err := decodeStream(api, 0, chunks)
	if err != nil {
		tb.Fatal(err)
	}
	return res, parts
}

// clonePart copies what a Part borrows from the decoder.
func clonePart(p *Part) Part {
	c := *p
	c.Text = bytes.Clone(p.Text)
	if p.Err != nil {
		e := *p.Err
		e.Raw = bytes.Clone(p.Err.Raw)
		c.Err = &e
	}
	return c
}

// partText joins the Text of the parts of one kind.
func partText(parts []Part, kind PartKind) string {
	var b strings.Builder
	for _, p := range parts {
		if p.Kind == kind {
			b.Write(p.Text)
		}
	}
	return b.String()
}

// decoderStreams returns, by name, every stream of api the property tests
// run over: the package's testdata and, when present, the recorded
// fixtures.
func decoderStreams(t *testing.T, api API) map[string][]byte {
	t.Helper()
	streams := map[string][]byte{}
	for _, f := range fixturetest.Glob(t, filepath.Join(decoderTestdata[api], "*.sse")) {
		streams[filepath.Base(f)] = fixturetest.ReadFile(t, f)
	}
	if !fixturetest.Present() {
		return streams
	}
	for name, e := range loadExpected(t) {
		if a, ok := e.decoderAPI(); ok && a == api {
			streams["fixture/"+name] = fixturetest.Read(t, name)
		}
	}
	return streams
}

// fuzzMaxEvent keeps the Reader's buffer small so that a fuzz run shows
// memory staying bounded by the input, not by what the input claims.
const fuzzMaxEvent = 1 << 16

// decodeSplit decodes data whole and cut at random points drawn from seed,
// with a Reader limited to fuzzMaxEvent, and fails when the two differ. It
// returns what the whole stream gave; ok is false when the Reader refused
// the input.
func decodeSplit(t *testing.T, api API, data []byte, seed uint64) (res *Result, parts []Part, ok bool) {
	t.Helper()
	res, parts, err := decodeStream(api, fuzzMaxEvent, fixturetest.Whole(data))
	if err != nil {
		return nil, nil, false
	}
	cut, cutParts, err := decodeStream(api, fuzzMaxEvent, fixturetest.RandomSplit(data, rand.New(rand.NewPCG(seed, uint64(len(data))))))
	if err != nil {
		t.Fatalf("the Reader refused the cut stream but not the whole one: %v", err)
	}
	if !reflect.DeepEqual(res, cut) {
		t.Fatalf("result depends on the cuts:\n%+v\n%+v", res, cut)
	}
	if !reflect.DeepEqual(parts, cutParts) {
		t.Fatal("parts depend on the cuts")
	}
	return res, parts, true
}

// addStreamSeeds adds every testdata stream of api as a seed.
func addStreamSeeds(f *testing.F, api API) {
	for i, path := range fixturetest.Glob(f, filepath.Join(decoderTestdata[api], "*.sse")) {
		f.Add(fixturetest.ReadFile(f, path), uint64(i))
	}
}

// testSplitInvariance runs checkSplitInvariance over every stream of apis.
func testSplitInvariance(t *testing.T, apis ...API) {
	for _, api := range apis {
		streams := decoderStreams(t, api)
		for i, name := range slices.Sorted(maps.Keys(streams)) {
			t.Run(string(api)+"/"+name, func(t *testing.T) {
				checkSplitInvariance(t, api, streams[name], uint64(i))
			})
		}
	}
}

// checkSplitInvariance decodes data whole, a byte at a time and cut at
// random points drawn from seed: the Result and the Parts must not depend
// on how the bytes arrived, nor the Result on whether Parts are emitted.
func checkSplitInvariance(t *testing.T, api API, data []byte, seed uint64) {
	t.Helper()
	want, wantParts := mustDecode(t, api, data)
	if len(wantParts) == 0 {
		t.Fatal("no parts")
	}
	splits := map[string][][]byte{"byte by byte": fixturetest.BySize(data, 1)}
	rng := rand.New(rand.NewPCG(seed, uint64(len(data))))
	for i := range 8 {
		splits["random "+strconv.Itoa(i)] = fixturetest.RandomSplit(data, rng)
	}
	for how, chunks := range splits {
		got, gotParts := mustDecode(t, api, chunks...)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: result differs:\n%+v\nwant\n%+v", how, got, want)
		}
		if !reflect.DeepEqual(gotParts, wantParts) {
			t.Errorf("%s: %d parts differ from %d whole-stream parts", how, len(gotParts), len(wantParts))
		}
	}
	noEmit, err := NewDecoder(api)
	if err != nil {
		t.Fatal(err)
	}
	if err := sse.Each(data, func(ev *sse.Event) error { noEmit.Decode(ev, nil); return nil }); err != nil {
		t.Fatal(err)
	}
	if got := noEmit.Finish(); !reflect.DeepEqual(got, want) {
		t.Errorf("without emit: result differs:\n%+v\nwant\n%+v", got, want)
	}
}
