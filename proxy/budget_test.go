package proxy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"gatekeeper/meter"
	"gatekeeper/trajectory"
)

// seed creates a root record of team-a with a dollar ceiling and what it
// has already spent, as if earlier turns had run.
func (e *env) seed(t *testing.T, id string, ceiling, spent float64) {
	t.Helper()
	now := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	rec := trajectory.New(id, "team-a", now)
	rec.Budget = trajectory.Budget{Dollars: ceiling}
	rec.Spend.Dollars = spent
	if err := e.store.Create(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
}

// sdkRun is what an official SDK client saw of one call.
type sdkRun struct {
	status  int    // the error's HTTP status; 0 when the call succeeded
	errBody string // the error body
	sent    []byte // the request body the SDK sent
	calls   []string
	text    string
}

func (r sdkRun) failed() bool { return r.status != 0 }

// read takes the calls and text of an Anthropic message.
func (r *sdkRun) read(m *anthropic.Message) {
	for _, b := range m.Content {
		switch b.Type {
		case "tool_use":
			r.calls = append(r.calls, b.Name)
		case "text":
			r.text += b.Text
		}
	}
}

// capture records the body a client sends.
func capture(dst *[]byte) func(*http.Request, func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	return func(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		*dst = b
		req.Body = io.NopCloser(bytes.NewReader(b))
		return next(req)
	}
}

func sdkError(t *testing.T, err error, run *sdkRun) {
	t.Helper()
	var ae *anthropic.Error
	var oe *openai.Error
	switch {
	case errors.As(err, &ae):
		run.status, run.errBody = ae.StatusCode, ae.RawJSON()
	case errors.As(err, &oe):
		run.status, run.errBody = oe.StatusCode, oe.RawJSON()
	default:
		t.Fatalf("call failed without an API error: %v", err)
	}
}

type sdkCase struct {
	name string
	path string // below gatekeeper's URL, before the SDK's own paths
	run  func(t *testing.T, base, spec string) sdkRun
}

var stageClients = []sdkCase{
	{"anthropic streaming", "/anthropic", func(t *testing.T, base, spec string) sdkRun {
		var out sdkRun
		c := anthropic.NewClient(aoption.WithBaseURL(base), aoption.WithAPIKey(vkA), aoption.WithMaxRetries(0),
			aoption.WithHeader("X-Mock-Turn", spec), aoption.WithMiddleware(capture(&out.sent)))
		s := c.Messages.NewStreaming(ctxT(t), anthropicStageParams())
		defer s.Close()
		var m anthropic.Message
		for s.Next() {
			if err := m.Accumulate(s.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Err(); err != nil {
			sdkError(t, err, &out)
			return out
		}
		out.read(&m)
		return out
	}},
	{"anthropic", "/anthropic", func(t *testing.T, base, spec string) sdkRun {
		var out sdkRun
		c := anthropic.NewClient(aoption.WithBaseURL(base), aoption.WithAPIKey(vkA), aoption.WithMaxRetries(0),
			aoption.WithHeader("X-Mock-Turn", spec), aoption.WithMiddleware(capture(&out.sent)))
		m, err := c.Messages.New(ctxT(t), anthropicStageParams())
		if err != nil {
			sdkError(t, err, &out)
			return out
		}
		out.read(m)
		return out
	}},
	{"chat streaming", "/openai/v1", func(t *testing.T, base, spec string) sdkRun {
		var out sdkRun
		c := openai.NewClient(ooption.WithBaseURL(base), ooption.WithAPIKey(vkA), ooption.WithMaxRetries(0),
			ooption.WithHeader("X-Mock-Turn", spec), ooption.WithMiddleware(capture(&out.sent)))
		s := c.Chat.Completions.NewStreaming(ctxT(t), chatParams())
		defer s.Close()
		acc := openai.ChatCompletionAccumulator{}
		for s.Next() {
			acc.AddChunk(s.Current())
		}
		if err := s.Err(); err != nil {
			sdkError(t, err, &out)
			return out
		}
		if len(acc.Choices) > 0 {
			out.text = acc.Choices[0].Message.Content
			for _, tc := range acc.Choices[0].Message.ToolCalls {
				out.calls = append(out.calls, tc.Function.Name)
			}
		}
		return out
	}},
	{"responses streaming", "/openai/v1", func(t *testing.T, base, spec string) sdkRun {
		var out sdkRun
		c := openai.NewClient(ooption.WithBaseURL(base), ooption.WithAPIKey(vkA), ooption.WithMaxRetries(0),
			ooption.WithHeader("X-Mock-Turn", spec), ooption.WithMiddleware(capture(&out.sent)))
		s := c.Responses.NewStreaming(ctxT(t), responsesStageParams())
		defer s.Close()
		var final responses.Response
		for s.Next() {
			if ev := s.Current(); ev.Type == "response.completed" || ev.Type == "response.incomplete" {
				final = ev.Response
			}
		}
		if err := s.Err(); err != nil {
			sdkError(t, err, &out)
			return out
		}
		for _, item := range final.Output {
			switch item.Type {
			case "function_call":
				out.calls = append(out.calls, item.Name)
			case "message":
				for _, c := range item.Content {
					out.text += c.Text
				}
			}
		}
		return out
	}},
}

func anthropicStageParams() anthropic.MessageNewParams {
	return anthropic.MessageNewParams{
		Model: "claude-sonnet-4-5", MaxTokens: 1024,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("check the weather"))},
		Tools: []anthropic.ToolUnionParam{
			{OfTool: &anthropic.ToolParam{Name: "get_weather", InputSchema: anthropic.ToolInputSchemaParam{
				Properties: map[string]any{"city": map[string]any{"type": "string"}}}}},
			{OfTool: &anthropic.ToolParam{Name: "Bash", InputSchema: anthropic.ToolInputSchemaParam{
				Properties: map[string]any{"command": map[string]any{"type": "string"}}}}},
		},
	}
}

func responsesStageParams() responses.ResponseNewParams {
	return responses.ResponseNewParams{
		Model: "gpt-4.1",
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("check the weather", responses.EasyInputMessageRoleUser)}},
		Tools: []responses.ToolUnionParam{
			{OfFunction: &responses.FunctionToolParam{Name: "get_weather", Strict: openai.Bool(false),
				Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}},
			{OfFunction: &responses.FunctionToolParam{Name: "Bash", Strict: openai.Bool(false),
				Parameters: map[string]any{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}}}},
		},
	}
}

// conversation is the request's conversation array: messages, or input.
func conversation(body []byte) gjson.Result {
	if m := gjson.GetBytes(body, "messages"); m.Exists() {
		return m
	}
	return gjson.GetBytes(body, "input")
}

// splice checks that up is sent with one insertion and nothing else
// changed, and returns the inserted bytes.
func splice(t *testing.T, sent, up []byte) []byte {
	t.Helper()
	p := 0
	for p < len(sent) && p < len(up) && sent[p] == up[p] {
		p++
	}
	q := 0
	for q < len(sent)-p && q < len(up)-p && sent[len(sent)-1-q] == up[len(up)-1-q] {
		q++
	}
	if p+q != len(sent) {
		t.Fatalf("the forwarded request changed bytes of the agent's: common prefix %d, suffix %d of %d\nsent %s\nup   %s", p, q, len(sent), sent, up)
	}
	return up[p : len(up)-q]
}

func lastUpstream(t *testing.T, e *env) []byte {
	t.Helper()
	reqs := e.mock.Requests()
	if len(reqs) == 0 {
		t.Fatal("nothing reached the provider")
	}
	return reqs[len(reqs)-1].Body
}

func TestSteerAppendsNoticeLast(t *testing.T) {
	for _, c := range stageClients {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, envOpts{})
			e.seed(t, "steer", 10, 7.5)
			run := c.run(t, e.gk+"/t/steer"+c.path, `{"kind":"text","text":"done"}`)
			if run.failed() {
				t.Fatalf("call refused: %d %s", run.status, run.errBody)
			}
			up := lastUpstream(t, e)
			// A streamed chat request also gets usage asked for, appended
			// at the end of the body: take that second insertion out.
			ask := []byte(`,"stream_options":{"include_usage":true}`)
			if !bytes.Contains(run.sent, []byte("stream_options")) && bytes.HasSuffix(up, append(ask, '}')) {
				up = append(bytes.Clone(bytes.TrimSuffix(up, append(ask, '}'))), '}')
			}
			ins := splice(t, run.sent, up)
			if !bytes.Contains(ins, []byte("budget notice")) {
				t.Errorf("inserted bytes %s hold no budget notice", ins)
			}
			conv := conversation(up).Array()
			sentConv := conversation(run.sent).Array()
			if len(conv) != len(sentConv)+1 {
				t.Fatalf("conversation has %d items, want %d", len(conv), len(sentConv)+1)
			}
			last := conv[len(conv)-1]
			if last.Get("role").String() != "user" || !strings.Contains(last.Raw, "dollars budget") {
				t.Errorf("last item %s is not the budget notice", last.Raw)
			}
			rec := e.record(t, "steer")
			waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "steer"); return rec.Turns == 1 })
			if rec.Stage != string(meter.Steer) || rec.BindingDimension != "dollars" {
				t.Errorf("record stage %q binding %q", rec.Stage, rec.BindingDimension)
			}
		})
	}
}

func TestRestrictKeepsReadOnlyTools(t *testing.T) {
	// The model asks for Bash, which the restrict stage removed: the
	// agent must never receive that call.
	spec := `{"kind":"tool","tools":[{"name":"Bash","input":{"command":"rm -rf /srv/data"}}]}`
	for _, c := range stageClients {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, envOpts{})
			e.seed(t, "narrow", 10, 9.3)
			run := c.run(t, e.gk+"/t/narrow"+c.path, spec)
			if run.failed() {
				t.Fatalf("call refused: %d %s", run.status, run.errBody)
			}
			up := lastUpstream(t, e)
			var names []string
			for _, tool := range gjson.GetBytes(up, "tools").Array() {
				name := tool.Get("name").String()
				if name == "" {
					name = tool.Get("function.name").String()
				}
				names = append(names, name)
			}
			if !slices.Equal(names, []string{"get_weather"}) {
				t.Errorf("forwarded tools %v, want only the read-only get_weather", names)
			}
			if len(run.calls) != 0 {
				t.Errorf("the agent received calls %v", run.calls)
			}
			if !strings.Contains(run.text, "withheld") {
				t.Errorf("the agent's text %q does not say the call was withheld", run.text)
			}
			last := conversation(up).Array()
			if n := len(last); n == 0 || !strings.Contains(last[n-1].Raw, "final answer") {
				t.Errorf("no final-answer notice at the end of the request")
			}
			var rec *trajectory.Record
			waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "narrow"); return rec.Turns == 1 })
			if rec.State != trajectory.Ready || len(rec.Pending.ToolCalls) != 0 || rec.Stage != string(meter.Restrict) {
				t.Errorf("record %s pending %v stage %s", rec.State, rec.Pending.ToolCalls, rec.Stage)
			}
		})
	}
}

func TestHaltRefusesWithoutForwarding(t *testing.T) {
	for _, c := range stageClients {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, envOpts{})
			e.seed(t, "spent", 10, 9.995) // $0.005: less than 1024 output tokens of either model
			for i := range 2 {
				run := c.run(t, e.gk+"/t/spent"+c.path, `{"kind":"text","text":"never"}`)
				if run.status != http.StatusPaymentRequired {
					t.Fatalf("call %d: status %d, want 402", i, run.status)
				}
				typ := gjson.Get(run.errBody, "error.type").String()
				if typ == "" {
					typ = gjson.Get(run.errBody, "type").String() // the OpenAI SDK keeps the inner object
				}
				if typ != "budget_exceeded" {
					t.Errorf("call %d: error type %q in %s", i, typ, run.errBody)
				}
			}
			if n := len(e.mock.Requests()); n != 0 {
				t.Errorf("%d requests reached the provider", n)
			}
			rec := e.record(t, "spent")
			if rec.State != trajectory.Failed || rec.ExitReason != "BUDGET_EXCEEDED" || rec.BindingDimension != "dollars" || rec.Stage != "halt" {
				t.Errorf("record %s %s binding %q stage %q", rec.State, rec.ExitReason, rec.BindingDimension, rec.Stage)
			}
			var states []trajectory.State
			for _, ev := range e.events(t, "spent") {
				if ev.Type == trajectory.EventTransition {
					states = append(states, ev.To)
				}
			}
			if !slices.Equal(states, []trajectory.State{trajectory.Finalizing, trajectory.Failed}) {
				t.Errorf("transitions %v, want FINALIZING, FAILED", states)
			}
		})
	}
}

// TestChargeInDollars checks a turn is charged at the table's price and an
// unknown model at the fallback, flagged.
func TestChargeInDollars(t *testing.T) {
	e := newEnv(t, envOpts{})
	resp := e.do(t, "POST", "/t/priced/anthropic/v1/messages", anthropicReq(true, "hello"), hdr("X-Mock-Turn", `{"kind":"text"}`)...)
	readAll(t, resp)
	var rec *trajectory.Record
	waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "priced"); return rec.Turns == 1 })
	u := trajectory.Usage{InputTokens: rec.Spend.InputTokens, CachedInputTokens: rec.Spend.CachedInputTokens,
		CacheWriteTokens: rec.Spend.CacheWriteTokens, OutputTokens: rec.Spend.OutputTokens}
	want := meter.DefaultTable().Cost("claude-sonnet-4-5", u)
	if !want.Priced || rec.Spend.Dollars != want.Dollars() || rec.FallbackPriced || rec.Spend.Dollars == 0 {
		t.Errorf("charged $%v (fallback %v), want $%v", rec.Spend.Dollars, rec.FallbackPriced, want.Dollars())
	}
	if rec.Reserved != (trajectory.Reservation{}) || rec.Call != "" {
		t.Errorf("reservation left after the turn: %+v call %q", rec.Reserved, rec.Call)
	}

	body := strings.Replace(anthropicReq(false, "hello"), "claude-sonnet-4-5", "claude-unreleased-9", 1)
	readAll(t, e.do(t, "POST", "/t/unpriced/anthropic/v1/messages", body, hdr("X-Mock-Turn", `{"kind":"text"}`)...))
	waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "unpriced"); return rec.Turns == 1 })
	if !rec.FallbackPriced || rec.Spend.Dollars <= 0 {
		t.Errorf("unknown model charged $%v, fallback flag %v", rec.Spend.Dollars, rec.FallbackPriced)
	}
}

// TestIncludeUsageAskedAndHidden checks a streamed chat call is metered
// from the provider's usage although the agent did not ask for it, and the
// agent receives no usage.
func TestIncludeUsageAskedAndHidden(t *testing.T) {
	e := newEnv(t, envOpts{})
	body := `{"model":"gpt-4.1","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	resp := e.do(t, "POST", "/t/usage/openai/v1/chat/completions", body,
		"Authorization", "Bearer "+vkA, "content-type", "application/json", "X-Mock-Turn", `{"kind":"text"}`)
	got := readAll(t, resp)
	up := lastUpstream(t, e)
	if !gjson.GetBytes(up, "stream_options.include_usage").Bool() {
		t.Errorf("upstream request %s does not ask for usage", up)
	}
	if bytes.Contains(got, []byte(`"usage"`)) {
		t.Errorf("the agent received usage it did not ask for:\n%s", got)
	}
	if !bytes.HasSuffix(bytes.TrimSpace(got), []byte("data: [DONE]")) {
		t.Errorf("stream does not end with [DONE]:\n%s", got)
	}
	var rec *trajectory.Record
	waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "usage"); return rec.Turns == 1 })
	if rec.Spend.Estimated || rec.Spend.OutputTokens == 0 {
		t.Errorf("spend %+v, want measured usage", rec.Spend)
	}
}

// TestParallelThreadsShareBudget runs 20 threads of one trajectory at once
// against a dollar ceiling: reservations and clamps keep the run's spend at
// or below the ceiling, the run uses all but at most one call's worth of
// it, and every thread ends halted.
func TestParallelThreadsShareBudget(t *testing.T) {
	const model = "claude-costly-1"
	e := newEnv(t, envOpts{limits: "prices:\n  " + model + ": {input: 100, cached_input: 10, cache_write: 125, output: 10000}"})
	const ceiling = 20.0
	e.seed(t, "par", ceiling, 0)
	body := strings.Replace(anthropicReq(false, "summarize the logs"), "claude-sonnet-4-5", model, 1)
	body = strings.Replace(body, `"max_tokens":1024`, `"max_tokens":100`, 1)
	table, err := meter.DefaultTable().With(map[string]meter.Price{model: {Input: 100, CachedInput: 10, CacheWrite: 125, Output: 10000}})
	if err != nil {
		t.Fatal(err)
	}
	slack := meter.ToDollars(table.Estimate(model, int64(len(body)), 100).Micros)

	var wg sync.WaitGroup
	var mu sync.Mutex
	halted, served := 0, 0
	var other []string
	for th := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				resp := e.do(t, "POST", "/t/par/anthropic/v1/messages", body,
					hdr("X-Claude-Code-Agent-Id", fmt.Sprintf("agent-%02d", th), "X-Mock-Turn", `{"kind":"text","text":"three restarts"}`)...)
				b := readAll(t, resp)
				mu.Lock()
				switch resp.StatusCode {
				case http.StatusOK:
					served++
					mu.Unlock()
					continue
				case http.StatusPaymentRequired:
					halted++
				default:
					other = append(other, fmt.Sprintf("%d %s", resp.StatusCode, b))
				}
				mu.Unlock()
				return
			}
		}()
	}
	wg.Wait()
	if len(other) > 0 {
		t.Fatalf("%d calls failed otherwise, first: %s", len(other), other[0])
	}
	rec := e.record(t, "par")
	t.Logf("%d calls served, spend $%.4f of $%.0f, one reservation $%.4f", served, rec.Spend.Dollars, ceiling, slack)
	if halted != 20 {
		t.Errorf("%d of 20 threads halted", halted)
	}
	if rec.Spend.Dollars > ceiling || rec.Spend.Dollars < ceiling-slack {
		t.Errorf("spend $%.4f, want at most the ceiling $%.0f and within one reservation ($%.4f) of it", rec.Spend.Dollars, ceiling, slack)
	}
	if rec.State != trajectory.Failed || rec.ExitReason != "BUDGET_EXCEEDED" {
		t.Errorf("root %s %s", rec.State, rec.ExitReason)
	}
	if rec.Reserved != (trajectory.Reservation{}) {
		t.Errorf("reservations left: %+v", rec.Reserved)
	}
	if int64(served) != rec.Spend.Turns {
		t.Errorf("root counts %d turns, %d calls were served", rec.Spend.Turns, served)
	}
}

// TestLostCallIsReclaimed: a thread whose call has been in flight longer
// than any call may run (the replica serving it died) gets its reservation
// back and takes new calls; the lost call is a turn charged as estimated
// (here from no beat: nothing).
func TestLostCallIsReclaimed(t *testing.T) {
	e := newEnv(t, envOpts{})
	old := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	rec := trajectory.New("lost", "team-a", old)
	rec.Budget = trajectory.Budget{Dollars: 10}
	lost := trajectory.Reservation{Calls: 1, Tokens: 2000, Micros: 9_000_000}
	rec.State, rec.Call, rec.CallReserved, rec.Reserved = trajectory.CallingModel, "c0ffee", lost, lost
	if err := e.store.Create(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	// Without the reclaim, the lost call's $9 reservation would push this
	// call past the ceiling.
	resp := e.do(t, "POST", "/t/lost/anthropic/v1/messages", anthropicReq(false, "again"), hdr("X-Mock-Turn", `{"kind":"text"}`)...)
	if b := readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "lost"); return rec.Turns == 2 })
	if rec.Reserved != (trajectory.Reservation{}) || rec.Call != "" || rec.State != trajectory.Ready {
		t.Errorf("record %s reserved %+v call %q", rec.State, rec.Reserved, rec.Call)
	}
	found := false
	for _, ev := range e.events(t, "lost") {
		if ev.Type == trajectory.EventTransition && ev.From == trajectory.CallingModel && ev.To == trajectory.Ready && ev.Reason == "call_lost" {
			found = true
		}
	}
	if !found {
		t.Error("no call_lost transition in the event log")
	}
}

// downStore is a store that can be made unreachable.
type downStore struct {
	trajectory.Store
	down     atomic.Bool
	refusals atomic.Int64
}

func (s *downStore) err() error {
	s.refusals.Add(1)
	return fmt.Errorf("store: %w", trajectory.ErrUnavailable)
}

func (s *downStore) Get(ctx context.Context, id string) (*trajectory.Record, error) {
	if s.down.Load() {
		return nil, s.err()
	}
	return s.Store.Get(ctx, id)
}

func (s *downStore) Create(ctx context.Context, rec *trajectory.Record, evs ...trajectory.Event) error {
	if s.down.Load() {
		return s.err()
	}
	return s.Store.Create(ctx, rec, evs...)
}

func (s *downStore) CreateChild(ctx context.Context, rec *trajectory.Record, max int, evs ...trajectory.Event) error {
	if s.down.Load() {
		return s.err()
	}
	return s.Store.CreateChild(ctx, rec, max, evs...)
}

func (s *downStore) UpdateChain(ctx context.Context, id string, fn func([]*trajectory.Record) ([]trajectory.Event, error)) ([]*trajectory.Record, error) {
	if s.down.Load() {
		return nil, s.err()
	}
	return s.Store.UpdateChain(ctx, id, fn)
}

// TestStoreDownFailsClosed: with the store unreachable a new turn is
// refused with a 503 the agent retries, and nothing is forwarded.
func TestStoreDownFailsClosed(t *testing.T) {
	ds := &downStore{}
	e := newEnv(t, envOpts{wrap: func(s trajectory.Store) trajectory.Store { ds.Store = s; return ds }})
	ds.down.Store(true)
	resp := e.do(t, "POST", "/t/closed/anthropic/v1/messages", anthropicReq(false, "hi"), hdr()...)
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("status %d Retry-After %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	if n := len(e.mock.Requests()); n != 0 {
		t.Errorf("%d requests forwarded with the store down", n)
	}
}

// TestChargeRetriedAfterStoreOutage: the store goes away while a reply
// streams; the agent gets the whole reply, and the turn's charge lands
// once the store is back, exactly once.
func TestChargeRetriedAfterStoreOutage(t *testing.T) {
	ds := &downStore{}
	e := newEnv(t, envOpts{realClock: true, wrap: func(s trajectory.Store) trajectory.Store { ds.Store = s; return ds }})
	resp := e.do(t, "POST", "/t/outage/anthropic/v1/messages", anthropicReq(true, "hi"),
		hdr("X-Mock-Turn", `{"kind":"text","deltas":5,"event_delay":"20ms"}`)...)
	ds.down.Store(true) // after admission, while the reply streams
	got := readAll(t, resp)
	if !bytes.Contains(got, []byte("message_stop")) {
		t.Fatalf("reply cut by the store outage:\n%s", got)
	}
	waitFor(t, "the settle to be refused", func() bool { return ds.refusals.Load() > 0 })
	if rec := e.record(t, "outage"); rec.Turns != 0 || rec.State != trajectory.CallingModel {
		t.Fatalf("turn recorded while the store was down: %s turns %d", rec.State, rec.Turns)
	}
	ds.down.Store(false)
	var rec *trajectory.Record
	waitFor(t, "the charge retried", func() bool { rec = e.record(t, "outage"); return rec.Turns == 1 })
	if rec.State != trajectory.Ready || rec.Spend.Dollars == 0 || rec.Reserved != (trajectory.Reservation{}) {
		t.Errorf("record %s spend %+v reserved %+v", rec.State, rec.Spend, rec.Reserved)
	}
	turns := 0
	for _, ev := range e.events(t, "outage") {
		if ev.Type == trajectory.EventTurn {
			turns++
		}
	}
	if turns != 1 {
		t.Errorf("%d turn events, want 1", turns)
	}
}
