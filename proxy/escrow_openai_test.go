package proxy_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"gatekeeper/approvals"
	"gatekeeper/trajectory"
)

// bgStream is an OpenAI SDK stream read in the background, noting when
// text and tool calls arrive.
type bgStream struct {
	text     chan struct{} // closed at the first text delta
	textOnce sync.Once
	tool     atomic.Bool // a tool call arrived
	done     chan struct{}
	err      error
	final    any // openai.ChatCompletion or responses.Response
}

func newBG() *bgStream { return &bgStream{text: make(chan struct{}), done: make(chan struct{})} }

func (b *bgStream) sawText() { b.textOnce.Do(func() { close(b.text) }) }

func (b *bgStream) untilText(t *testing.T) {
	t.Helper()
	select {
	case <-b.text:
	case <-b.done:
		t.Fatalf("stream ended before its text: %v", b.err)
	case <-time.After(10 * time.Second):
		t.Fatal("no text within 10 s")
	}
	if b.tool.Load() {
		t.Fatal("a tool call reached the client while it should be held")
	}
}

func (b *bgStream) wait(t *testing.T) any {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(20 * time.Second):
		t.Fatal("stream did not end within 20 s")
	}
	if b.err != nil {
		t.Fatalf("stream: %v", b.err)
	}
	return b.final
}

func oaiClient(base, key, spec string) openai.Client {
	return openai.NewClient(ooption.WithBaseURL(base), ooption.WithAPIKey(key), ooption.WithMaxRetries(0),
		ooption.WithHeader("X-Mock-Turn", spec))
}

func bashChatParams() openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: "gpt-4.1",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("clean up")},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "Bash",
			Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}}})}}
}

func startChat(ctx context.Context, c openai.Client, p openai.ChatCompletionNewParams) *bgStream {
	b := newBG()
	go func() {
		defer close(b.done)
		s := c.Chat.Completions.NewStreaming(ctx, p)
		defer s.Close()
		acc := openai.ChatCompletionAccumulator{}
		for s.Next() {
			ch := s.Current()
			acc.AddChunk(ch)
			for _, c := range ch.Choices {
				if c.Delta.Content != "" {
					b.sawText()
				}
				if len(c.Delta.ToolCalls) > 0 {
					b.tool.Store(true)
				}
			}
		}
		b.err, b.final = s.Err(), acc.ChatCompletion
	}()
	return b
}

func bashResponsesParams() responses.ResponseNewParams {
	return responses.ResponseNewParams{Model: "gpt-4.1", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("clean up")},
		Tools: []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "Bash", Strict: openai.Bool(false),
			Parameters: map[string]any{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}}}}}}
}

func startResponses(ctx context.Context, c openai.Client, p responses.ResponseNewParams) *bgStream {
	b := newBG()
	go func() {
		defer close(b.done)
		s := c.Responses.NewStreaming(ctx, p)
		defer s.Close()
		var final responses.Response
		for s.Next() {
			ev := s.Current()
			switch ev.Type {
			case "response.output_text.delta":
				b.sawText()
			case "response.output_item.added":
				if ev.Item.Type == "function_call" {
					b.tool.Store(true)
				}
			case "response.completed", "response.incomplete", "response.failed":
				final = ev.Response
			}
		}
		b.err, b.final = s.Err(), final
	}()
	return b
}

// oaiCase runs one OpenAI API through the escrow.
type oaiCase struct {
	name  string
	start func(ctx context.Context, c openai.Client) *bgStream
	// plain sends the same turn without streaming.
	plain func(ctx context.Context, c openai.Client) (any, error)
	// calls returns the final reply's tool calls (name, id, arguments) and text.
	calls func(final any) (names, ids, args []string, text string)
}

var oaiCases = []oaiCase{
	{"chat", func(ctx context.Context, c openai.Client) *bgStream { return startChat(ctx, c, bashChatParams()) },
		func(ctx context.Context, c openai.Client) (any, error) {
			r, err := c.Chat.Completions.New(ctx, bashChatParams())
			if err != nil {
				return nil, err
			}
			return *r, nil
		},
		func(final any) (names, ids, args []string, text string) {
			cc := final.(openai.ChatCompletion)
			if len(cc.Choices) == 0 {
				return nil, nil, nil, ""
			}
			m := cc.Choices[0].Message
			for _, tc := range m.ToolCalls {
				names, ids, args = append(names, tc.Function.Name), append(ids, tc.ID), append(args, tc.Function.Arguments)
			}
			return names, ids, args, m.Content
		}},
	{"responses", func(ctx context.Context, c openai.Client) *bgStream {
		return startResponses(ctx, c, bashResponsesParams())
	},
		func(ctx context.Context, c openai.Client) (any, error) {
			r, err := c.Responses.New(ctx, bashResponsesParams())
			if err != nil {
				return nil, err
			}
			return *r, nil
		},
		func(final any) (names, ids, args []string, text string) {
			r := final.(responses.Response)
			for _, it := range r.Output {
				if it.Type == "function_call" {
					names, ids, args = append(names, it.Name), append(ids, it.CallID), append(args, it.Arguments.OfString)
				}
			}
			return names, ids, args, r.OutputText()
		}},
}

// Held, then approved or denied, on Chat Completions and Responses.
func TestEscrowOpenAI(t *testing.T) {
	for _, tc := range oaiCases {
		t.Run(tc.name+" approve", func(t *testing.T) {
			e := newEnv(t, envOpts{limits: gatesYAML("", "")})
			spec := bashTurn("rm -rf ./build")
			direct := tc.start(ctxT(t), oaiClient(e.twinURL+"/v1", oaiKey, spec)).wait(t)
			s := tc.start(ctxT(t), oaiClient(e.gk+"/t/esc-oai/openai/v1", vkA, spec))
			s.untilText(t)
			e.waitState(t, "esc-oai", trajectory.AwaitingApproval)
			r := e.pending(t, "esc-oai", 1)[0]
			if r.Call.Name != "Bash" || string(r.Call.Input) != `{"command":"rm -rf ./build"}` {
				t.Fatalf("request call %s %s", r.Call.Name, r.Call.Input)
			}
			if _, err := e.vote(t, r.ID, "carol", []string{"secops"}, true); err != nil {
				t.Fatal(err)
			}
			via := s.wait(t)
			if a, b := mustJSON(t, direct), mustJSON(t, via); a != b {
				t.Fatalf("released reply differs from the provider's:\ndirect %s\nvia    %s", a, b)
			}
			names, ids, args, _ := tc.calls(via)
			if len(names) != 1 || names[0] != "Bash" || ids[0] != r.CallID || !jsonEqual(t, []byte(args[0]), []byte(`{"command":"rm -rf ./build"}`)) {
				t.Fatalf("released calls %v %v %v", names, ids, args)
			}
			e.waitState(t, "esc-oai", trajectory.WaitingTool)
		})
		t.Run(tc.name+" deny", func(t *testing.T) {
			e := newEnv(t, envOpts{limits: gatesYAML("", "")})
			s := tc.start(ctxT(t), oaiClient(e.gk+"/t/esc-oai/openai/v1", vkA, bashTurn("rm -rf /")))
			s.untilText(t)
			r := e.pending(t, "esc-oai", 1)[0]
			if _, err := e.vote(t, r.ID, "carol", []string{"secops"}, false); err != nil {
				t.Fatal(err)
			}
			names, _, _, text := tc.calls(s.wait(t))
			if len(names) != 0 || !strings.HasPrefix(text, "I will clean the build directory now.") || !strings.Contains(text, "Done: received 1 tool result") {
				t.Fatalf("reply after denial: calls %v text %q", names, text)
			}
			bodies := e.turnRequests()
			if len(bodies) != 2 || !strings.Contains(string(bodies[1]), approvals.ReasonDenied) {
				t.Fatalf("continuation requests %d", len(bodies))
			}
			e.waitState(t, "esc-oai", trajectory.Ready)
		})
	}
}

// A streaming client gives up during the hold; its non-streamed retry
// re-attaches and gets the approved call as one body.
func TestEscrowOpenAINonStreamingRetry(t *testing.T) {
	for _, tc := range oaiCases {
		t.Run(tc.name, func(t *testing.T) {
			logs := &lockedBuffer{}
			e := newEnv(t, envOpts{limits: gatesYAML("", ""), log: logs})
			spec := bashTurn("rm -rf ./build")
			c := oaiClient(e.gk+"/t/esc-oai-retry/openai/v1", vkA, spec)
			ctx, giveUp := context.WithCancel(ctxT(t))
			s := tc.start(ctx, c)
			s.untilText(t)
			r := e.pending(t, "esc-oai-retry", 1)[0]
			giveUp()
			<-s.done
			// Gatekeeper learns that the client left only when its side of
			// the connection sees it close. Until then the original request
			// still waits on the hold, and a decision then would go to it
			// (and be lost with its connection) while the retry, losing the
			// claim, got 409: the client is known gone before the decision.
			waitFor(t, "the original request ended", func() bool { return strings.Contains(logs.String(), "reply broke off") })
			type result struct {
				v   any
				err error
			}
			got := make(chan result, 1)
			go func() {
				v, err := tc.plain(ctxT(t), c)
				got <- result{v, err}
			}()
			waitFor(t, "the retry re-attached", func() bool {
				return strings.Contains(logs.String(), "request re-attached to a held turn")
			})
			if code := e.adminVote(t, r.ID, carolToken, "approve"); code != 200 {
				t.Fatalf("approve: %d", code)
			}
			var res result
			select {
			case res = <-got:
			case <-time.After(20 * time.Second):
				t.Fatal("retry got no reply")
			}
			if res.err != nil {
				t.Fatal(res.err)
			}
			names, ids, args, text := tc.calls(res.v)
			if len(names) != 1 || ids[0] != r.CallID || !jsonEqual(t, []byte(args[0]), []byte(`{"command":"rm -rf ./build"}`)) ||
				!strings.HasPrefix(text, "I will clean the build directory now.") {
				t.Fatalf("retry got calls %v %v %v, text %q", names, ids, args, text)
			}
			if n := len(e.turnRequests()); n != 1 {
				t.Fatalf("mock saw %d turn requests, want 1", n)
			}
			e.waitState(t, "esc-oai-retry", trajectory.WaitingTool)
		})
	}
}

// slowRecord is an approvals store whose first hold, once stored, waits
// (at most 10 s) for release before its creator goes on to record the
// turn: the request is pending while the record is still CALLING_MODEL.
type slowRecord struct {
	approvals.Store
	once     sync.Once
	created  chan struct{} // closed when the first hold is stored
	looked   chan struct{} // closed at the first FindHold after that
	lookOnce sync.Once
	release  chan struct{}
}

func newSlowRecord(s approvals.Store) *slowRecord {
	return &slowRecord{Store: s, created: make(chan struct{}), looked: make(chan struct{}), release: make(chan struct{})}
}

func (s *slowRecord) CreateHold(ctx context.Context, h *approvals.Hold, reqs []*approvals.Request) (*approvals.Hold, error) {
	out, err := s.Store.CreateHold(ctx, h, reqs)
	first := false
	s.once.Do(func() { first = true })
	if first && err == nil {
		close(s.created)
		select {
		case <-s.release:
		case <-time.After(10 * time.Second):
		}
	}
	return out, err
}

func (s *slowRecord) FindHold(ctx context.Context, trajectory, key string) (*approvals.Hold, error) {
	select {
	case <-s.created:
		s.lookOnce.Do(func() { close(s.looked) })
	default:
	}
	return s.Store.FindHold(ctx, trajectory, key)
}

// A retry that arrives once the turn's hold is stored, before its record
// is AWAITING_APPROVAL, re-attaches to that hold: it neither calls the
// model again on a sibling record nor waits on a second approval request.
func TestEscrowRetryBeforeRecorded(t *testing.T) {
	for _, tc := range oaiCases {
		t.Run(tc.name, func(t *testing.T) {
			slow := (*slowRecord)(nil)
			e := newEnv(t, envOpts{limits: gatesYAML("", ""), approvals: func(s approvals.Store) approvals.Store {
				slow = newSlowRecord(s)
				return slow
			}})
			defer func() {
				select {
				case <-slow.release:
				default:
					close(slow.release)
				}
			}()
			c := oaiClient(e.gk+"/t/esc-oai-early/openai/v1", vkA, bashTurn("rm -rf ./build"))
			ctx, giveUp := context.WithCancel(ctxT(t))
			s := tc.start(ctx, c)
			select {
			case <-slow.created:
			case <-time.After(10 * time.Second):
				t.Fatal("no hold within 10 s")
			}
			r := e.pending(t, "esc-oai-early", 1)[0]
			if st := e.record(t, "esc-oai-early").State; st != trajectory.CallingModel {
				t.Fatalf("record %s while its hold is being recorded", st)
			}
			giveUp()
			<-s.done
			got := make(chan error, 1)
			var v any
			go func() {
				var err error
				v, err = tc.plain(ctxT(t), c)
				got <- err
			}()
			// The retry looks for the hold at admission; a sibling's
			// turn would look for it when holding its own reply.
			select {
			case <-slow.looked:
			case <-time.After(10 * time.Second):
				t.Fatal("the retry did not look for the hold within 10 s")
			}
			close(slow.release)
			e.waitState(t, "esc-oai-early", trajectory.AwaitingApproval)
			if code := e.adminVote(t, r.ID, carolToken, "approve"); code != 200 {
				t.Fatalf("approve: %d", code)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(20 * time.Second):
				all, _ := e.apst.List(context.Background(), approvals.Filter{State: approvals.Pending, Limit: 100})
				t.Fatalf("retry got no reply; pending requests %d, mock turn requests %d", len(all), len(e.turnRequests()))
			}
			names, ids, _, _ := tc.calls(v)
			if len(names) != 1 || ids[0] != r.CallID {
				t.Fatalf("retry got calls %v %v", names, ids)
			}
			if n := len(e.turnRequests()); n != 1 {
				t.Fatalf("mock saw %d turn requests, want 1", n)
			}
			e.waitState(t, "esc-oai-early", trajectory.WaitingTool)
		})
	}
}
