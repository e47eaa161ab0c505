package streaming_test

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
)

// filterStreams returns, by name, every stream of api the property tests
// run over: the filter's testdata, the decoders' and the recorded fixtures.
func filterStreams(t *testing.T, api streaming.API) map[string][]byte {
	t.Helper()
	streams := decoderStreams(t, api)
	for _, path := range fixturetest.Glob(t, filepath.Join(filterTestdata, filterPrefix(api)+"*.sse")) {
		streams["filter/"+filepath.Base(path)] = fixturetest.ReadFile(t, path)
	}
	return streams
}

var filterAPIs = []streaming.API{streaming.APIAnthropic, streaming.APIChat, streaming.APIResponses}

// TestCallFilterAllowAllIsIdentity: with nothing refused, the client gets
// the bytes that came, and nothing is listed as refused.
func TestCallFilterAllowAllIsIdentity(t *testing.T) {
	for _, api := range filterAPIs {
		streams := filterStreams(t, api)
		for _, name := range slices.Sorted(maps.Keys(streams)) {
			t.Run(string(api)+"/"+name, func(t *testing.T) {
				f := newTestFilter(t, api, allowAll)
				if out := filterChunks(t, f, streams[name]); !bytes.Equal(out, streams[name]) {
					t.Errorf("output differs from input")
				}
				if len(f.Refused()) != 0 {
					t.Errorf("refused %+v", f.Refused())
				}
			})
		}
	}
}

// TestCallFilterFixtures runs the recorded replies with client tool calls
// through a filter that refuses every tool and one that allows them all.
func TestCallFilterFixtures(t *testing.T) {
	seen := 0
	for name, exp := range loadExpected(t) {
		api, ok := exp.decoderAPI()
		if !ok || len(exp.ToolCalls) == 0 {
			continue
		}
		in := fixturetest.Read(t, name)
		inRes, _ := mustDecode(t, api, in)
		clients := inRes.ClientToolCalls()
		if len(clients) == 0 {
			continue // server tools only
		}
		seen++
		t.Run(name, func(t *testing.T) {
			f := newTestFilter(t, api, refuseAll)
			out := filterChunks(t, f, in)
			res, _ := mustDecode(t, api, out)
			if got := res.ClientToolCalls(); len(got) != 0 {
				t.Errorf("refuse all delivered %+v", got)
			}
			if len(res.Stops) != len(inRes.Stops) {
				t.Errorf("stops %+v, want %d", res.Stops, len(inRes.Stops))
			}
			for _, s := range res.Stops {
				if s.Reason != streaming.StopEndTurn {
					t.Errorf("stop %+v, want end of turn", s)
				}
			}
			if res.Unparsed != inRes.Unparsed || res.Truncated != inRes.Truncated || res.Done != inRes.Done {
				t.Errorf("unparsed %d truncated %v done %v, input %d %v %v",
					res.Unparsed, res.Truncated, res.Done, inRes.Unparsed, inRes.Truncated, inRes.Done)
			}
			refused := f.Refused()
			if len(refused) != len(clients) {
				t.Errorf("refused %d calls, the reply has %d", len(refused), len(clients))
			}
			for _, tc := range clients {
				if bytes.Contains(out, []byte(strconv.Quote(tc.ID))) {
					t.Errorf("the output holds the id %s", tc.ID)
				}
			}
			if apis[api].numbered {
				checkSequenceNumbers(t, in, out)
			}

			if same := filterChunks(t, newTestFilter(t, api, allowAll), in); !bytes.Equal(same, in) {
				t.Error("allow all changed the stream")
			}
		})
	}
	if seen == 0 {
		t.Fatal("no fixture has a client tool call")
	}
}

// TestCallFilterSplitInvariance: the events a Reader finds do not depend
// on how the stream was cut, and neither does what the filter makes of them.
func TestCallFilterSplitInvariance(t *testing.T) {
	some := refuseNames("Bash", "Write", "apply_patch", "get_weather", "get_current_weather", "GetWeatherArgs", "write_file", "")
	policies := []struct {
		name  string
		allow func(string) bool
		hold  bool
		end   int // End before this event, -1 for none
	}{
		{"refuse all", refuseAll, false, -1},
		{"refuse some", some, false, -1},
		{"hold, allow all", allowAll, true, -1},
		{"hold, refuse some", some, true, -1},
		{"hold, refuse some, end early", some, true, 7},
	}
	for _, api := range filterAPIs {
		streams := filterStreams(t, api)
		for i, name := range slices.Sorted(maps.Keys(streams)) {
			data := streams[name]
			for _, p := range policies {
				t.Run(string(api)+"/"+name+"/"+p.name, func(t *testing.T) {
					filter := func() *streaming.CallFilter {
						f := newTestFilter(t, api, p.allow)
						if p.hold {
							f.Hold()
						}
						return f
					}
					want := holdChunks(t, filter(), p.end, data)
					splits := map[string][][]byte{"byte by byte": fixturetest.BySize(data, 1)}
					rng := rand.New(rand.NewPCG(uint64(i), uint64(len(data))))
					for j := range 4 {
						splits["random "+strconv.Itoa(j)] = fixturetest.RandomSplit(data, rng)
					}
					for how, chunks := range splits {
						if got := holdChunks(t, filter(), p.end, chunks...); !bytes.Equal(got, want) {
							t.Errorf("%s: output differs", how)
						}
					}
				})
			}
		}
	}
}

// TestCallFilterFastPath: letting every call through copies each event's
// bytes and allocates nothing.
func TestCallFilterFastPath(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	streams := map[string]struct {
		api  streaming.API
		data []byte
	}{
		"anthropic tool call": {streaming.APIAnthropic, benchToolStream()},
		"chat tool calls":     {streaming.APIChat, openAIBenchChatStream(3, 400)},
		"responses tool call": {streaming.APIResponses, benchResponsesToolStream(400)},
	}
	for _, api := range filterAPIs {
		prefix := map[streaming.API]string{streaming.APIAnthropic: "anthropic-", streaming.APIChat: "chat-", streaming.APIResponses: "responses-"}[api]
		for _, path := range fixturetest.Glob(t, filepath.Join(filterTestdata, prefix+"*.sse")) {
			streams[filepath.Base(path)] = struct {
				api  streaming.API
				data []byte
			}{api, fixturetest.ReadFile(t, path)}
		}
	}
	for name, s := range streams {
		t.Run(name, func(t *testing.T) {
			events := sseEvents(t, s.data)
			f := newTestFilter(t, s.api, allowAll)
			for i, ev := range events {
				if out := f.AppendEvent(nil, ev); !bytes.Equal(out, ev.Raw) {
					t.Fatalf("event %d: got %q, want %q", i, out, ev.Raw)
				}
			}
			const runs = 20
			filters := make([]*streaming.CallFilter, runs+1)
			for i := range filters {
				filters[i] = newTestFilter(t, s.api, allowAll)
			}
			dst := make([]byte, 0, len(s.data))
			n := 0
			allocs := testing.AllocsPerRun(runs, func() {
				f := filters[n]
				n++
				for _, ev := range events {
					dst = f.AppendEvent(dst[:0], ev)
				}
			})
			if allocs != 0 {
				t.Errorf("%.1f allocations per reply of %d events, want 0", allocs, len(events))
			}
		})
	}
}

// benchResponsesToolStream builds a Responses reply with two function calls
// (read_file, then write_file), the second with about argBytes of
// arguments in fragments of a few bytes, numbered and obfuscated as current
// streams are.
func benchResponsesToolStream(argBytes int) []byte {
	var b strings.Builder
	seq := 0
	event := func(typ, body string) {
		fmt.Fprintf(&b, "event: %s\ndata: {\"type\":%q,\"sequence_number\":%d,%s}\n\n", typ, typ, seq, body)
		seq++
	}
	resp := `"response":{"id":"resp_BENCH","object":"response","created_at":1751569118,"status":"%s","model":"gpt-5-2025-08-07","output":%s,"usage":%s}`
	event("response.created", fmt.Sprintf(resp, "in_progress", "[]", "null"))
	items := make([]string, 0, 2)
	for i, name := range []string{"read_file", "write_file"} {
		id, call := fmt.Sprintf("fc_BENCH%d", i), fmt.Sprintf("call_BENCH%d", i)
		event("response.output_item.added", fmt.Sprintf(`"output_index":%d,"item":{"id":%q,"type":"function_call","status":"in_progress","arguments":"","call_id":%q,"name":%q}`, i, id, call, name))
		frags := []string{`{\"pa`, `th\": \"`, `src/`, `main`, `.go\", `, `\"body\"`, `: \"pac`, `kage `, `main\\n`, `\\nfunc`, ` main() {`, `}\\n\"`}
		var args strings.Builder
		for n, j := 0, 0; n < argBytes*i+10; j++ {
			f := frags[j%len(frags)]
			event("response.function_call_arguments.delta", fmt.Sprintf(`"item_id":%q,"output_index":%d,"delta":"%s","obfuscation":"k3Jd9"`, id, i, f))
			args.WriteString(f)
			n += len(f)
		}
		item := fmt.Sprintf(`{"id":%q,"type":"function_call","status":"completed","arguments":"%s","call_id":%q,"name":%q}`, id, args.String(), call, name)
		event("response.function_call_arguments.done", fmt.Sprintf(`"item_id":%q,"output_index":%d,"arguments":"%s"`, id, i, args.String()))
		event("response.output_item.done", fmt.Sprintf(`"output_index":%d,"item":%s`, i, item))
		items = append(items, item)
	}
	event("response.completed", fmt.Sprintf(resp, "completed", "["+strings.Join(items, ",")+"]",
		`{"input_tokens":1515,"input_tokens_details":{"cached_tokens":1390},"output_tokens":4000,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":5515}`))
	return []byte(b.String())
}

// TestBenchFilterStreams keeps the benchmark inputs honest.
func TestBenchFilterStreams(t *testing.T) {
	for _, bc := range filterBenchCases() {
		in, _ := mustDecode(t, bc.api, bc.data)
		if in.Unparsed != 0 || !in.Done || len(in.ClientToolCalls()) < 2 {
			t.Fatalf("%s: %+v", bc.name, in)
		}
		f := newTestFilter(t, bc.api, refuseNames(bc.refuse))
		res, _ := mustDecode(t, bc.api, filterChunks(t, f, bc.data))
		if len(f.Refused()) != 1 || len(res.ClientToolCalls()) != len(in.ClientToolCalls())-1 || res.Unparsed != 0 {
			t.Fatalf("%s: refused %+v, delivered %d of %d, unparsed %d", bc.name, f.Refused(), len(res.ClientToolCalls()), len(in.ClientToolCalls()), res.Unparsed)
		}
	}
}

type filterBenchCase struct {
	name   string
	api    streaming.API
	data   []byte
	refuse string
}

// filterBenchCases are replies with two or more calls, one of which the
// refuse-one runs withhold: the largest, so that most events take the
// withholding path.
func filterBenchCases() []filterBenchCase {
	anthropic := benchAnthropicStream(`{"type":"text","text":""}`, 1, func(int) string { return `{"type":"text_delta","text":"Reading first."}` })
	tool := benchToolStream()
	// Splice the write_file call of the tool stream in after a read_file call.
	start := bytes.Index(tool, []byte("event: content_block_start"))
	end := bytes.Index(tool, []byte("event: message_delta"))
	read := bytes.ReplaceAll(bytes.ReplaceAll(tool[start:end], []byte(`"index":0`), []byte(`"index":1`)), []byte("write_file"), []byte("read_file"))
	read = read[:bytes.Index(read, []byte("event: content_block_delta"))]
	read = append(read, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n"...)
	write := bytes.ReplaceAll(tool[start:end], []byte(`"index":0`), []byte(`"index":2`))
	at := bytes.Index(anthropic, []byte("event: message_delta"))
	var a []byte
	a = append(a, anthropic[:at]...)
	a = append(a, read...)
	a = append(a, write...)
	a = append(a, bytes.Replace(anthropic[at:], []byte(`"end_turn"`), []byte(`"tool_use"`), 1)...)

	chat := openAIBenchChatStream(3, 40000)
	chat = bytes.Replace(chat, []byte(`"name":"write_file"`), []byte(`"name":"read_file"`), 1)
	return []filterBenchCase{
		{"anthropic", streaming.APIAnthropic, a, "write_file"},
		{"chat", streaming.APIChat, chat, "read_file"},
		{"responses", streaming.APIResponses, benchResponsesToolStream(120000), "write_file"},
	}
}

// BenchmarkCallFilter measures a reply going through a Reader, in
// network-sized reads, and a filter that allows every call or refuses one,
// or holds every call and allows them all.
func BenchmarkCallFilter(b *testing.B) {
	for _, bc := range filterBenchCases() {
		for _, policy := range []struct {
			name  string
			allow func(string) bool
			hold  bool
		}{
			{"allow_all", allowAll, false},
			{"refuse_one", refuseNames(bc.refuse), false},
			{"hold_allow_all", allowAll, true},
		} {
			b.Run(bc.name+"/"+policy.name, func(b *testing.B) {
				const read = 4 << 10
				data := bc.data
				out := make([]byte, 0, 64<<10)
				b.SetBytes(int64(len(data)))
				b.ReportAllocs()
				for b.Loop() {
					f, err := dialects[bc.api].NewCallFilter(policy.allow, filterRefusal)
					if err != nil {
						b.Fatal(err)
					}
					if policy.hold {
						f.Hold()
					}
					fn := func(ev *sse.Event) error {
						out = f.AppendEvent(out[:0], *ev)
						return nil
					}
					r := sse.NewReader(0)
					for off := 0; off < len(data); off += read {
						if err := r.Feed(data[off:min(off+read, len(data))], fn); err != nil {
							b.Fatal(err)
						}
					}
					if err := r.Finish(fn); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
