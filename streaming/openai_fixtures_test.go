package streaming

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// The recorded provider streams live outside the repository; these tests
// read them when present and skip otherwise.
const openAIFixtureDir = "../../shared/fixtures"

// openAIExpected is one fixture's entry in EXPECTED.json: the raw facts the
// recording holds, in the provider's own vocabulary.
type openAIExpected struct {
	API        string               `json:"api"`
	Stop       []json.RawMessage    `json:"stop"`
	ToolCalls  []openAIExpectedCall `json:"tool_calls"`
	Usage      map[string]any       `json:"usage"`
	Errors     []map[string]any     `json:"errors"`
	DoneMarker bool                 `json:"done_marker"`
}

type openAIExpectedCall struct {
	Choice      int    `json:"choice"`
	Index       int    `json:"index"`
	ID          string `json:"id"`
	ItemID      string `json:"item_id"`
	CallID      string `json:"call_id"`
	OutputIndex int    `json:"output_index"`
	Name        string `json:"name"`
	Arguments   string `json:"arguments"`
}

// openAIExpectedStop is a Responses terminal event as EXPECTED.json has it.
type openAIExpectedStop struct {
	Event             string `json:"event"`
	Status            string `json:"status"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// loadOpenAIExpected reads EXPECTED.json, skipping the test when the
// fixtures are not there.
func loadOpenAIExpected(t *testing.T) map[string]openAIExpected {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(openAIFixtureDir, "EXPECTED.json"))
	if errors.Is(err, fs.ErrNotExist) {
		t.Skip("shared fixtures not present")
	}
	if err != nil {
		t.Fatal(err)
	}
	var all map[string]openAIExpected
	if err := json.Unmarshal(raw, &all); err != nil {
		t.Fatalf("EXPECTED.json: %v", err)
	}
	return all
}

// openAIFixtures returns the Chat and Responses fixtures' names, sorted.
func openAIFixtures(all map[string]openAIExpected) []string {
	var names []string
	for name, e := range all {
		if e.API == "chat" || e.API == "responses" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

func openAIFixtureAPI(e openAIExpected) API {
	if e.API == "responses" {
		return APIResponses
	}
	return APIChat
}

func TestOpenAIFixtures(t *testing.T) {
	all := loadOpenAIExpected(t)
	names := openAIFixtures(all)
	if len(names) < 20 {
		t.Fatalf("only %d chat/responses fixtures in EXPECTED.json", len(names))
	}
	for _, name := range names {
		e := all[name]
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(openAIFixtureDir, name))
			if err != nil {
				t.Fatal(err)
			}
			api := openAIFixtureAPI(e)
			res, parts, err := openAIRun(api, [][]byte{data})
			if err != nil {
				t.Fatal(err)
			}
			openAICheckStops(t, e, res)
			openAICheckToolCalls(t, e, res)
			openAICheckUsage(t, e, res)
			openAICheckErrors(t, e, res)
			if api == APIChat && res.Done != e.DoneMarker {
				t.Errorf("Done = %v, recording has [DONE] = %v", res.Done, e.DoneMarker)
			}
			if api == APIResponses && res.Done != (len(e.Stop) > 0) {
				t.Errorf("Done = %v with %d terminal events", res.Done, len(e.Stop))
			}
			if res.Truncated {
				t.Error("a complete recording decoded as truncated")
			}
			if res.Unparsed != 0 {
				t.Errorf("Unparsed = %d: %v", res.Unparsed, res.UnparsedErrors)
			}
			openAICheckPartsAgree(t, res, parts)
		})
	}
}

func openAICheckStops(t *testing.T, e openAIExpected, res *Result) {
	t.Helper()
	var want []Stop
	if e.API == "chat" {
		choice0 := false
		for _, raw := range e.Stop {
			var pair []any
			if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 {
				t.Fatalf("chat stop %s: %v", raw, err)
			}
			choice, fr := int(pair[0].(float64)), pair[1].(string)
			choice0 = choice0 || choice == 0
			want = append(want, Stop{Choice: choice, Reason: openAIChatReason(fr), Raw: fr})
		}
		if len(e.Errors) > 0 && !choice0 {
			want = append(want, Stop{Reason: StopError, Raw: "error"})
		}
	} else {
		for _, raw := range e.Stop {
			var s openAIExpectedStop
			if err := json.Unmarshal(raw, &s); err != nil {
				t.Fatalf("responses stop %s: %v", raw, err)
			}
			switch s.Event {
			case "response.completed":
				reason := StopEndTurn
				if len(e.ToolCalls) > 0 {
					reason = StopToolUse
				}
				want = append(want, Stop{Reason: reason, Raw: s.Event})
			case "response.incomplete":
				reason := StopReason(s.IncompleteDetails.Reason)
				if s.IncompleteDetails.Reason == "max_output_tokens" {
					reason = StopMaxTokens
				}
				want = append(want, Stop{Reason: reason, Raw: s.Event + ":" + s.IncompleteDetails.Reason})
			case "response.failed":
				want = append(want, Stop{Reason: StopError, Raw: s.Event})
			default:
				t.Fatalf("unexpected terminal event %q", s.Event)
			}
		}
	}
	if !reflect.DeepEqual(res.Stops, want) {
		t.Errorf("Stops = %+v, want %+v", res.Stops, want)
	}
}

// openAIChatReason is the finish_reason table of the brief, restated.
func openAIChatReason(fr string) StopReason {
	return map[string]StopReason{
		"stop": StopEndTurn, "length": StopMaxTokens, "tool_calls": StopToolUse,
		"function_call": StopToolUse, "content_filter": StopContentFilter,
	}[fr]
}

func openAICheckToolCalls(t *testing.T, e openAIExpected, res *Result) {
	t.Helper()
	if len(res.ToolCalls) != len(e.ToolCalls) {
		t.Fatalf("%d tool calls, want %d: %+v", len(res.ToolCalls), len(e.ToolCalls), res.ToolCalls)
	}
	for i, w := range e.ToolCalls {
		got := res.ToolCalls[i]
		var want ToolCall
		if e.API == "chat" {
			want = ToolCall{Choice: w.Choice, Index: w.Index, Type: "function", ID: w.ID, Name: w.Name, Complete: true}
		} else {
			want = ToolCall{Index: w.OutputIndex, Type: "function_call", ID: w.CallID, ItemID: w.ItemID, Name: w.Name, Complete: true}
		}
		if !openAIJSONEqual(got.Arguments, []byte(w.Arguments)) {
			t.Errorf("call %d arguments = %s, want %s", i, got.Arguments, w.Arguments)
		}
		got.Arguments = nil
		if !reflect.DeepEqual(got, want) {
			t.Errorf("call %d = %+v, want %+v", i, got, want)
		}
	}
}

func openAIJSONEqual(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// openAIWantUsage applies the normalization rules to a raw usage object.
func openAIWantUsage(api string, u map[string]any) Usage {
	num := func(path ...string) int64 {
		var cur any = u
		for _, p := range path {
			m, ok := cur.(map[string]any)
			if !ok {
				return 0
			}
			cur = m[p]
		}
		f, _ := cur.(float64)
		return int64(f)
	}
	if api == "responses" {
		cached := num("input_tokens_details", "cached_tokens")
		write := num("input_tokens_details", "cache_write_tokens")
		return Usage{
			InputTokens: max(num("input_tokens")-cached-write, 0), CachedInputTokens: cached, CacheWriteTokens: write,
			OutputTokens: num("output_tokens"), ReasoningTokens: num("output_tokens_details", "reasoning_tokens"),
		}
	}
	prompt, completion, total := num("prompt_tokens"), num("completion_tokens"), num("total_tokens")
	cached := num("prompt_tokens_details", "cached_tokens")
	if cached == 0 {
		cached = num("prompt_cache_hit_tokens")
	}
	write := num("prompt_tokens_details", "cache_write_tokens")
	reasoning := num("completion_tokens_details", "reasoning_tokens")
	output := completion
	if reasoning > 0 && total == prompt+completion+reasoning {
		output += reasoning
	}
	return Usage{
		InputTokens: max(prompt-cached-write, 0), CachedInputTokens: cached, CacheWriteTokens: write,
		OutputTokens: output, ReasoningTokens: reasoning,
	}
}

func openAICheckUsage(t *testing.T, e openAIExpected, res *Result) {
	t.Helper()
	if e.Usage == nil {
		if res.UsageSeen {
			t.Errorf("usage %+v reported, recording has none", res.Usage)
		}
		return
	}
	if !res.UsageSeen {
		t.Fatal("no usage, recording has one")
	}
	if want := openAIWantUsage(e.API, e.Usage); res.Usage != want {
		t.Errorf("Usage = %+v, want %+v", res.Usage, want)
	}
}

func openAICheckErrors(t *testing.T, e openAIExpected, res *Result) {
	t.Helper()
	if len(res.Errors) != len(e.Errors) {
		t.Fatalf("%d errors, want %d: %+v", len(res.Errors), len(e.Errors), res.Errors)
	}
	for i, w := range e.Errors {
		inner, _ := w["error"].(map[string]any)
		msg, _ := inner["message"].(string)
		if res.Errors[i].Message != msg {
			t.Errorf("error %d message = %q, want %q", i, res.Errors[i].Message, msg)
		}
		if res.Errors[i].Type == "" {
			t.Errorf("error %d has no type", i)
		}
	}
}

// openAICheckPartsAgree checks that the Part stream tells the same story as
// the Result: one start per call, ends for complete calls, one Stop part
// per stop, one Done part when done, one Error part per error.
func openAICheckPartsAgree(t *testing.T, res *Result, parts []Part) {
	t.Helper()
	count := map[PartKind]int{}
	args := map[[2]int][]byte{}
	for _, p := range parts {
		count[p.Kind]++
		if p.Kind == PartToolCallArgs {
			k := [2]int{p.Choice, p.Index}
			args[k] = append(args[k], p.Text...)
		}
	}
	var clientCalls, complete int
	for _, tc := range res.ToolCalls {
		if tc.Server {
			continue
		}
		clientCalls++
		if tc.Complete {
			complete++
		}
	}
	stopParts := len(res.Stops)
	if res.API == APIResponses && !res.Done && len(res.Errors) > 0 {
		stopParts-- // the error stop Finish concludes has no Part
	}
	checks := []struct {
		kind PartKind
		want int
	}{
		{PartToolCallStart, clientCalls},
		{PartToolCallEnd, complete},
		{PartStop, stopParts},
		{PartError, len(res.Errors)},
		{PartDone, map[bool]int{true: 1}[res.Done]},
		{PartMessageStart, map[bool]int{true: 1}[res.MessageID != ""]},
	}
	for _, c := range checks {
		if count[c.kind] != c.want {
			t.Errorf("%d %v parts, want %d", count[c.kind], c.kind, c.want)
		}
	}
	if res.UsageSeen != (count[PartUsage] > 0) {
		t.Errorf("UsageSeen = %v with %d usage parts", res.UsageSeen, count[PartUsage])
	}
	if res.API == APIChat {
		// Chat arguments are only ever the concatenation of their fragments.
		for _, tc := range res.ToolCalls {
			if got := args[[2]int{tc.Choice, tc.Index}]; !bytes.Equal(got, tc.Arguments) {
				t.Errorf("call %d/%d fragments %q != arguments %q", tc.Choice, tc.Index, got, tc.Arguments)
			}
		}
	}
}

// openAIGolden is what a test expects of one decoded reply: the Result's
// facts plus the text its delta Parts carried.
type openAIGolden struct {
	ID, Model string
	Stops     []Stop
	Calls     []openAIGoldenCall
	Usage     *Usage // nil: no usage report
	Errors    []string
	Done      bool
	Truncated bool
	Unparsed  int
	Text      string // text deltas, in arrival order
	Thinking  string
	Refusal   string
}

type openAIGoldenCall struct {
	Choice, Index    int
	Type, ID, ItemID string
	Name, Args       string
	Complete, Server bool
}

// openAIDigest reduces a Result and its Parts to what goldens state, and
// checks the invariants every reply must keep.
func openAIDigest(t *testing.T, res *Result, parts []Part) openAIGolden {
	t.Helper()
	g := openAIGolden{
		ID: res.MessageID, Model: res.Model, Stops: res.Stops, Done: res.Done, Truncated: res.Truncated,
		Unparsed: res.Unparsed,
	}
	for _, tc := range res.ToolCalls {
		g.Calls = append(g.Calls, openAIGoldenCall{
			Choice: tc.Choice, Index: tc.Index, Type: tc.Type, ID: tc.ID, ItemID: tc.ItemID, Name: tc.Name,
			Args: string(tc.Arguments), Complete: tc.Complete, Server: tc.Server,
		})
	}
	if res.UsageSeen {
		u := res.Usage
		g.Usage = &u
	}
	for _, e := range res.Errors {
		g.Errors = append(g.Errors, e.Type+": "+e.Message)
		if len(e.Raw) == 0 {
			t.Errorf("error %q kept no raw JSON", e.Message)
		}
	}
	var deltaBytes int64
	var text, thinking, refusal strings.Builder
	for _, p := range parts {
		switch p.Kind {
		case PartTextDelta:
			text.Write(p.Text)
		case PartThinkingDelta:
			thinking.Write(p.Text)
		case PartRefusalDelta:
			refusal.Write(p.Text)
		case PartToolCallArgs:
		default:
			continue
		}
		deltaBytes += int64(len(p.Text))
	}
	g.Text, g.Thinking, g.Refusal = text.String(), thinking.String(), refusal.String()
	for _, tc := range res.ToolCalls {
		if tc.Server { // server-run calls stream no Parts but are output all the same
			deltaBytes += int64(len(tc.Arguments))
		}
	}
	if res.OutputBytes != deltaBytes {
		t.Errorf("OutputBytes = %d, delta parts carried %d", res.OutputBytes, deltaBytes)
	}
	openAICheckPartsAgree(t, res, parts)
	return g
}

func openAIRunFile(t *testing.T, api API, path string) (*Result, []Part) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	res, parts, err := openAIRun(api, [][]byte{data})
	if err != nil {
		t.Fatal(err)
	}
	return res, parts
}

func openAICompare(t *testing.T, got, want openAIGolden) {
	t.Helper()
	if !reflect.DeepEqual(got.Calls, want.Calls) {
		t.Errorf("calls:\n got %+v\nwant %+v", got.Calls, want.Calls)
	}
	if !reflect.DeepEqual(got.Usage, want.Usage) {
		t.Errorf("usage: got %+v, want %+v", got.Usage, want.Usage)
	}
	got.Calls, want.Calls, got.Usage, want.Usage = nil, nil, nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("\n got %+v\nwant %+v", got, want)
	}
}

// openAIDigestJSON reduces a non-streaming Result (no Parts) for goldens.
func openAIDigestJSON(res *Result) openAIGolden {
	g := openAIGolden{ID: res.MessageID, Model: res.Model, Stops: res.Stops, Done: res.Done, Truncated: res.Truncated, Unparsed: res.Unparsed}
	for _, tc := range res.ToolCalls {
		g.Calls = append(g.Calls, openAIGoldenCall{
			Choice: tc.Choice, Index: tc.Index, Type: tc.Type, ID: tc.ID, ItemID: tc.ItemID, Name: tc.Name,
			Args: string(tc.Arguments), Complete: tc.Complete, Server: tc.Server,
		})
	}
	if res.UsageSeen {
		u := res.Usage
		g.Usage = &u
	}
	for _, e := range res.Errors {
		g.Errors = append(g.Errors, e.Type+": "+e.Message)
	}
	return g
}

// openAICheckCovered fails when a testdata stream has no golden.
func openAICheckCovered(t *testing.T, dir string, covered map[string]bool) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.sse"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !covered[filepath.Base(f)] {
			t.Errorf("%s has no golden case", f)
		}
	}
}
