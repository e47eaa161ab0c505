package streaming_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/tidwall/gjson"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/internal/streamtest"
	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
)

// Fuzz targets for the escrow's reshaping functions: no panic, output
// bounded by the input, and either an error or output of the right kind.

// escrowFuzzMax bounds fuzz inputs; escrowGrowth bounds how much larger
// than its input an output may be (a tool call fragment of a few bytes
// becomes a call with every member written out, a byte of bad UTF-8 a
// \ufffd escape).
const (
	escrowFuzzMax    = 1 << 15
	escrowGrowth     = 96
	escrowGrowthBase = 4096
)

func fuzzAPI(sel uint8) streaming.API { return escrowAPIs[int(sel)%len(escrowAPIs)] }

func checkBounded(t *testing.T, out []byte, in ...[]byte) {
	t.Helper()
	n := 0
	for _, b := range in {
		n += len(b)
	}
	if len(out) > escrowGrowth*n+escrowGrowthBase {
		t.Fatalf("%d output bytes from %d input bytes", len(out), n)
	}
}

// addEscrowStreamSeeds adds every reply stream of the package's testdata,
// with its API's selector.
func addEscrowStreamSeeds(f *testing.F, add func(sel uint8, stream []byte)) {
	for i, api := range escrowAPIs {
		for _, dir := range []string{decoderTestdata[api]} {
			for _, p := range fixturetest.Glob(f, filepath.Join(dir, "*.sse")) {
				add(uint8(i), fixturetest.ReadFile(f, p))
			}
		}
		for _, p := range fixturetest.Glob(f, filepath.Join(filterTestdata, filterPrefix(api)+"*.sse")) {
			add(uint8(i), fixturetest.ReadFile(f, p))
		}
	}
}

func FuzzAssembleJSON(f *testing.F) {
	addEscrowStreamSeeds(f, func(sel uint8, s []byte) { f.Add(sel, s) })
	f.Fuzz(func(t *testing.T, sel uint8, stream []byte) {
		if len(stream) > escrowFuzzMax {
			return
		}
		api := fuzzAPI(sel)
		body, err := dialects[api].AssembleJSON(stream)
		if err != nil {
			if !errors.Is(err, streaming.ErrIncompleteStream) && !errors.Is(err, streaming.ErrInvalidJSON) && !errors.Is(err, sse.ErrEventTooLarge) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		checkBounded(t, body, stream)
		if !gjson.ValidBytes(body) {
			t.Fatalf("not JSON: %s", body)
		}
		if _, err := dialects[api].DecodeJSON(body); err != nil {
			t.Fatalf("the assembled body does not decode: %v: %s", err, body)
		}
	})
}

func FuzzRenderSSE(f *testing.F) {
	addEscrowStreamSeeds(f, func(sel uint8, s []byte) {
		if body, err := dialects[fuzzAPI(sel)].AssembleJSON(s); err == nil {
			f.Add(sel, body)
		}
	})
	for i, name := range []string{"anthropic-body.json", "chat-body.json", "responses-body.json"} {
		f.Add(uint8(i), fixturetest.ReadFile(f, filterTestdata, name))
	}
	f.Fuzz(func(t *testing.T, sel uint8, body []byte) {
		if len(body) > escrowFuzzMax {
			return
		}
		api := fuzzAPI(sel)
		stream, err := dialects[api].RenderSSE(body)
		if err != nil {
			if !errors.Is(err, streaming.ErrInvalidJSON) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		checkBounded(t, stream, body)
		res, err := streamtest.Decode(dialects[api], 0, fixturetest.Whole(stream))
		if err != nil {
			t.Fatalf("the rendered stream does not read: %v", err)
		}
		if res.Unparsed != 0 {
			t.Fatalf("%d events of the rendered stream do not decode: %v\n%s", res.Unparsed, res.UnparsedErrors, stream)
		}
	})
}

func FuzzContinuation(f *testing.F) {
	reqs := []string{"anthropic-claude-code-turn1.json", "chat-openai-sdk-parallel-tools.json", "responses-codex-exec.json"}
	bodies := []string{"anthropic-body.json", "chat-body.json", "responses-body.json"}
	for i := range escrowAPIs {
		f.Add(uint8(i), fixturetest.ReadFile(f, "testdata/requests", reqs[i]), fixturetest.ReadFile(f, filterTestdata, bodies[i]), false)
		f.Add(uint8(i), fixturetest.ReadFile(f, "testdata/requests", reqs[i]),
			fixturetest.ReadFile(f, filterTestdata, filterPrefix(escrowAPIs[i])+"text-refused-allowed.sse"), true)
	}
	f.Add(uint8(2), []byte(`{"input":"hi","stream":true}`), []byte(`{"output":[{"type":"function_call","call_id":"c","name":"n","arguments":"{}"}]}`), false)
	f.Fuzz(func(t *testing.T, sel uint8, req, reply []byte, streamed bool) {
		if len(req)+len(reply) > escrowFuzzMax {
			return
		}
		results := map[string][]byte{"": []byte(refusedResult)}
		out, err := dialects[fuzzAPI(sel)].Continuation(req, reply, streamed, results)
		if err != nil {
			return
		}
		checkBounded(t, out, req, reply, []byte(refusedResult))
		if !gjson.ValidBytes(out) {
			t.Fatalf("not JSON: %s", out)
		}
	})
}

func FuzzSpliceStream(f *testing.F) {
	for i, api := range escrowAPIs {
		for _, tc := range spliceCases[api] {
			f.Add(uint8(i), fixturetest.ReadFile(f, tc.first...), fixturetest.ReadFile(f, tc.cont...))
		}
	}
	f.Fuzz(func(t *testing.T, sel uint8, first, cont []byte) {
		if len(first)+len(cont) > escrowFuzzMax {
			return
		}
		api := fuzzAPI(sel)
		out, err := dialects[api].SpliceStream(first, cont)
		if err != nil {
			return
		}
		checkBounded(t, out, first, cont)
		if _, err := streamtest.Decode(dialects[api], 0, fixturetest.Whole(out)); err != nil {
			t.Fatalf("the spliced stream does not read: %v", err)
		}
	})
}
