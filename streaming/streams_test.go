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

	"github.com/tidwall/gjson"

	"gatekeeper/internal/fixturetest"
	. "gatekeeper/streaming"
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
// returns the finished Result and the Reader's error. A Reader that holds
// more than its limit panics.
func decodeStream(api API, maxEvent int, chunks [][]byte) (*Result, error) {
	dec := dialects[api].NewDecoder()
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

// mustDecode is decodeStream for a stream the default Reader accepts, with
// what the stream says read apart from the decoder (streamSays).
func mustDecode(tb testing.TB, api API, chunks ...[]byte) (*Result, says) {
	tb.Helper()
	res, err := decodeStream(api, 0, chunks)
	if err != nil {
		tb.Fatal(err)
	}
	return res, streamSays(tb, api, bytes.Join(chunks, nil))
}

// says is the text a stream carries, by kind, in the order it came.
type says struct {
	Text, Thinking, Refusal string
	Args                    string // client and server call arguments deltas
	// ByChoice is the text, thinking and refusal of each choice (Chat;
	// choice 0 elsewhere), keyed kind/choice.
	ByChoice map[string]string
}

// streamSays reads what stream says straight from its events' JSON, with
// gjson paths and no decoder, so that a test can tell that the text of a
// stream survived a filter or a reshaping whatever the decoders read.
func streamSays(tb testing.TB, api API, stream []byte) says {
	tb.Helper()
	var text, thinking, refusal, args strings.Builder
	byChoice := map[string]string{}
	add := func(b *strings.Builder, kind string, choice int64, s string) {
		if s != "" {
			b.WriteString(s)
			byChoice[kind+"/"+strconv.FormatInt(choice, 10)] += s
		}
	}
	err := sse.Each(stream, func(ev *sse.Event) error {
		if !ev.HasData || !gjson.ValidBytes(ev.Data) {
			return nil
		}
		js := gjson.ParseBytes(ev.Data)
		switch api {
		case APIAnthropic:
			switch js.Get("type").Str {
			case "content_block_start":
				add(&text, "text", 0, js.Get("content_block.text").Str)
				add(&thinking, "thinking", 0, js.Get("content_block.thinking").Str)
			case "content_block_delta":
				switch d := js.Get("delta"); d.Get("type").Str {
				case "text_delta":
					add(&text, "text", 0, d.Get("text").Str)
				case "thinking_delta":
					add(&thinking, "thinking", 0, d.Get("thinking").Str)
				case "input_json_delta":
					args.WriteString(d.Get("partial_json").Str)
				}
			}
		case APIChat:
			for _, c := range js.Get("choices").Array() {
				d, n := c.Get("delta"), c.Get("index").Int()
				add(&text, "text", n, d.Get("content").Str)
				add(&refusal, "refusal", n, d.Get("refusal").Str)
				if r := d.Get("reasoning_content").Str; r != "" {
					add(&thinking, "thinking", n, r)
				} else {
					add(&thinking, "thinking", n, d.Get("reasoning").Str)
				}
				for _, tc := range d.Get("tool_calls").Array() {
					args.WriteString(tc.Get("function.arguments").Str)
				}
				args.WriteString(d.Get("function_call.arguments").Str)
			}
		case APIResponses:
			switch typ := js.Get("type").Str; typ {
			case "response.output_text.delta":
				add(&text, "text", 0, js.Get("delta").Str)
			case "response.refusal.delta":
				add(&refusal, "refusal", 0, js.Get("delta").Str)
			case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
				add(&thinking, "thinking", 0, js.Get("delta").Str)
			case "response.function_call_arguments.delta", "response.custom_tool_call_input.delta", "response.mcp_call_arguments.delta":
				args.WriteString(js.Get("delta").Str)
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("reading what the stream says: %v", err)
	}
	return says{Text: text.String(), Thinking: thinking.String(), Refusal: refusal.String(), Args: args.String(), ByChoice: byChoice}
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
func decodeSplit(t *testing.T, api API, data []byte, seed uint64) (res *Result, ok bool) {
	t.Helper()
	res, err := decodeStream(api, fuzzMaxEvent, fixturetest.Whole(data))
	if err != nil {
		return nil, false
	}
	cut, err := decodeStream(api, fuzzMaxEvent, fixturetest.RandomSplit(data, rand.New(rand.NewPCG(seed, uint64(len(data))))))
	if err != nil {
		t.Fatalf("the Reader refused the cut stream but not the whole one: %v", err)
	}
	if !reflect.DeepEqual(res, cut) {
		t.Fatalf("result depends on the cuts:\n%+v\n%+v", res, cut)
	}
	return res, true
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
// random points drawn from seed: the Result must not depend on how the
// bytes arrived.
func checkSplitInvariance(t *testing.T, api API, data []byte, seed uint64) {
	t.Helper()
	want, _ := mustDecode(t, api, data)
	if reflect.DeepEqual(want, &Result{API: api}) {
		t.Fatal("nothing decoded")
	}
	splits := map[string][][]byte{"byte by byte": fixturetest.BySize(data, 1)}
	rng := rand.New(rand.NewPCG(seed, uint64(len(data))))
	for i := range 8 {
		splits["random "+strconv.Itoa(i)] = fixturetest.RandomSplit(data, rng)
	}
	for how, chunks := range splits {
		got, _ := mustDecode(t, api, chunks...)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: result differs:\n%+v\nwant\n%+v", how, got, want)
		}
	}
}
