package streaming

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// openAIRun feeds a stream, cut into the given chunks, through a Reader and
// the API's decoder, and returns the final Result and a copy of every Part.
func openAIRun(api API, chunks [][]byte) (*Result, []Part, error) {
	dec, err := NewDecoder(api)
	if err != nil {
		return nil, nil, err
	}
	var parts []Part
	emit := func(p *Part) {
		c := *p
		c.Text = bytes.Clone(p.Text)
		if p.Err != nil {
			e := *p.Err
			c.Err = &e
		}
		parts = append(parts, c)
	}
	fn := func(ev *Event) error {
		dec.Decode(ev, emit)
		return nil
	}
	r := NewReader(0)
	for _, c := range chunks {
		if err := r.Feed(c, fn); err != nil {
			return nil, nil, err
		}
	}
	if err := r.Finish(fn); err != nil {
		return nil, nil, err
	}
	return dec.Finish(), parts, nil
}

// openAISplitBytes cuts data into one-byte chunks.
func openAISplitBytes(data []byte) [][]byte {
	out := make([][]byte, len(data))
	for i := range data {
		out[i] = data[i : i+1]
	}
	return out
}

// openAISplitRandom cuts data at random points drawn from seed.
func openAISplitRandom(data []byte, seed uint64) [][]byte {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var out [][]byte
	for len(data) > 0 {
		n := min(1+rng.IntN(64), len(data))
		out = append(out, data[:n])
		data = data[n:]
	}
	return out
}

// openAIStreams is every OpenAI stream the property tests run over: the
// package's own testdata and, when present, the shared recordings.
func openAIStreams(t *testing.T) map[string]API {
	t.Helper()
	streams := map[string]API{}
	for dir, api := range map[string]API{"testdata/chat": APIChat, "testdata/responses": APIResponses} {
		files, err := filepath.Glob(filepath.Join(dir, "*.sse"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			streams[f] = api
		}
	}
	if len(streams) == 0 {
		t.Fatal("no testdata streams")
	}
	if _, err := os.Stat(openAIFixtureDir); err == nil {
		all := loadOpenAIExpected(t)
		for _, name := range openAIFixtures(all) {
			streams[filepath.Join(openAIFixtureDir, name)] = openAIFixtureAPI(all[name])
		}
	}
	return streams
}

// TestOpenAISplitInvariance: the same stream decoded whole, byte by byte
// and in random cuts gives the same Result and the same Parts.
func TestOpenAISplitInvariance(t *testing.T) {
	for path, api := range openAIStreams(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want, wantParts, err := openAIRun(api, [][]byte{data})
			if err != nil {
				t.Fatal(err)
			}
			if len(wantParts) == 0 {
				t.Fatal("no parts")
			}
			splits := map[string][][]byte{"bytes": openAISplitBytes(data)}
			for seed := range uint64(4) {
				splits["random"+string(rune('0'+seed))] = openAISplitRandom(data, seed)
			}
			for name, chunks := range splits {
				got, gotParts, err := openAIRun(api, chunks)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s: Result\n%+v\nwant\n%+v", name, got, want)
				}
				if !reflect.DeepEqual(gotParts, wantParts) {
					t.Errorf("%s: %d parts differ from %d whole-stream parts", name, len(gotParts), len(wantParts))
				}
			}
		})
	}
}

// openAIFuzzSeeds adds every testdata stream of dir as a seed.
func openAIFuzzSeeds(f *testing.F, dir string) {
	files, err := filepath.Glob(filepath.Join(dir, "*.sse"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no seeds in %s: %v", dir, err)
	}
	for i, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, uint64(i))
	}
}

// openAIFuzzStream checks what must hold for any input: no panic, the
// same Result however the bytes are cut, memory bounded by the input, and
// a Truncated flag that follows the rules.
func openAIFuzzStream(t *testing.T, api API, data []byte, seed uint64) {
	if len(data) > 1<<16 {
		return
	}
	whole, wholeParts, err := openAIRun(api, [][]byte{data})
	if err != nil {
		return // the Reader refused the input; nothing reached the decoder
	}
	cut, cutParts, err := openAIRun(api, openAISplitRandom(data, seed))
	if err != nil {
		t.Fatalf("split stream failed where the whole one did not: %v", err)
	}
	if !reflect.DeepEqual(whole, cut) || !reflect.DeepEqual(wholeParts, cutParts) {
		t.Fatalf("split changed the result:\n%+v\n%+v", whole, cut)
	}
	var args int
	for _, tc := range whole.ToolCalls {
		args += len(tc.Arguments)
	}
	if args > len(data) || len(whole.ToolCalls) > len(data) || len(wholeParts) > len(data)+2 {
		t.Fatalf("%d argument bytes, %d calls, %d parts from %d input bytes", args, len(whole.ToolCalls), len(wholeParts), len(data))
	}
	if len(whole.UnparsedErrors) > maxUnparsedErrors || len(whole.UnparsedErrors) > whole.Unparsed {
		t.Fatalf("%d unparsed errors kept for %d unparsed", len(whole.UnparsedErrors), whole.Unparsed)
	}
	for _, e := range whole.UnparsedErrors {
		if !errors.Is(e, ErrInvalidJSON) {
			t.Fatalf("unparsed error %v is not ErrInvalidJSON", e)
		}
	}
	if whole.Truncated == (whole.Done || len(whole.Errors) > 0) {
		t.Fatalf("Truncated = %v with Done = %v and %d errors", whole.Truncated, whole.Done, len(whole.Errors))
	}
}

func FuzzChat(f *testing.F) {
	openAIFuzzSeeds(f, "testdata/chat")
	f.Add([]byte("data: {\"choices\":null,\"error\":false}\n\ndata: [DONE]"), uint64(7))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		openAIFuzzStream(t, APIChat, data, seed)
	})
}

func FuzzResponses(f *testing.F) {
	openAIFuzzSeeds(f, "testdata/responses")
	f.Add([]byte("event: error\ndata: {\"type\":\"error\",\"code\":5}\n\n"), uint64(3))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		openAIFuzzStream(t, APIResponses, data, seed)
	})
}

// openAIFuzzJSON checks a non-streaming decoder: no panic, invalid input
// reported as ErrInvalidJSON, a valid body always done and never truncated.
func openAIFuzzJSON(t *testing.T, api API, body []byte) {
	res, err := DecodeJSON(api, body)
	if err != nil {
		if !errors.Is(err, ErrInvalidJSON) || res != nil {
			t.Fatalf("DecodeJSON = %v, %v", res, err)
		}
		return
	}
	if !res.Done || res.Truncated || res.API != api {
		t.Fatalf("Done = %v, Truncated = %v, API = %q", res.Done, res.Truncated, res.API)
	}
	for _, tc := range res.ToolCalls {
		if len(tc.Arguments) > len(body) {
			t.Fatalf("arguments of %d bytes from a %d-byte body", len(tc.Arguments), len(body))
		}
	}
}

func FuzzChatJSON(f *testing.F) {
	for _, c := range chatJSONCases {
		f.Add([]byte(c.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { openAIFuzzJSON(t, APIChat, body) })
}

func FuzzResponsesJSON(f *testing.F) {
	for _, c := range responsesJSONCases {
		f.Add([]byte(c.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { openAIFuzzJSON(t, APIResponses, body) })
}
