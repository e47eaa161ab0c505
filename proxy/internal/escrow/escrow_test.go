package escrow

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gatekeeper/approvals"
	"gatekeeper/config"
	"gatekeeper/meter"
	"gatekeeper/store/memory"
	"gatekeeper/streaming"
	"gatekeeper/streaming/anthropic"
	"gatekeeper/trajectory"
)

// heldJSON is an Anthropic reply with some text and one Bash call that
// the test gate holds.
const heldJSON = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5",` +
	`"content":[{"type":"text","text":"I will clean the build directory now."},` +
	`{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"rm -rf ./build"}}],` +
	`"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":20}}`

func dialect(streaming.API) streaming.Dialect { return anthropic.Dialect{} }

// noSignals never wakes a wait: the tests decide before they wait, or
// wait out the keepalive.
type noSignals struct{}

func (noSignals) Wait(string) (<-chan struct{}, func()) { return nil, func() {} }

// rig is an escrow over memory stores with one gate, and a record of
// tenant team-a calling the model.
type rig struct {
	e       *Keeper
	svc     *approvals.Service
	apst    *memory.Approvals
	records *memory.Store
	down    *atomic.Bool // the escrow's reads of records fail
	closing chan struct{}
	rec     string
}

// outage is a records store whose reads fail while down is set.
type outage struct {
	trajectory.Store
	down *atomic.Bool
}

func (o outage) Get(ctx context.Context, id string) (*trajectory.Record, error) {
	if o.down.Load() {
		return nil, errors.New("records store down")
	}
	return o.Store.Get(ctx, id)
}

func newRig(t *testing.T, onRefusal string) *rig {
	t.Helper()
	gates, err := approvals.Compile([]config.Gate{{Name: "destructive-shell", When: `tool.name == "Bash" && tool.input.command.matches("rm -rf")`,
		Tenants: []string{"team-a"}, Approvers: config.Approvers{Roles: []string{"secops"}, Quorum: 1}, OnRefusal: onRefusal}})
	if err != nil {
		t.Fatal(err)
	}
	apst := memory.NewApprovals(memory.ApprovalsOptions{})
	svc := approvals.NewService(approvals.ServiceOptions{Store: apst, Gates: gates, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { _ = svc.Close(context.Background()) })
	records := memory.New(memory.Options{})
	r := &rig{svc: svc, apst: apst, records: records, down: new(atomic.Bool), closing: make(chan struct{}), rec: "run-1"}
	r.e = New(Config{Service: svc, Approvals: config.Approvals{Keepalive: config.Duration(20 * time.Millisecond)}, Records: outage{records, r.down},
		Stages: meter.Thresholds{Steer: 0.5, Restrict: 0.8, Halt: 1}, Dialect: dialect, Signals: noSignals{}, Closing: r.closing})
	now := time.Now()
	rec := &trajectory.Record{ID: r.rec, Tenant: "team-a", State: trajectory.Ready, CreatedAt: now, UpdatedAt: now}
	if _, err := rec.BeginTurn(now); err != nil {
		t.Fatal(err)
	}
	if err := records.Create(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	return r
}

// open holds heldJSON for the gated call, the record moving to
// AWAITING_APPROVAL as the turn's settle would move it.
func (r *rig) open(t *testing.T) *approvals.Hold {
	t.Helper()
	ctx := context.Background()
	rep := Reply{Form: FormJSON, Body: []byte(heldJSON)}
	res, err := rep.Decode(anthropic.Dialect{})
	if err != nil {
		t.Fatal(err)
	}
	gated := r.e.Gated(res, approvals.Input{Tenant: "team-a", Trajectory: r.rec}, func(string) bool { return false })
	if len(gated) != 1 || gated[0].Call.ID != "toolu_1" {
		t.Fatalf("gated %+v", gated)
	}
	turn := Turn{Trajectory: r.rec, Root: r.rec, Thread: "th", Tenant: "team-a", Key: "turn_k", API: streaming.APIAnthropic,
		Provider: "anthropic", Model: "claude-sonnet-4-5", Request: []byte(`{"messages":[]}`), Log: r.e.log}
	h, err := r.e.Open(ctx, turn, res, rep, gated, func(approvalID string) {
		_, err := r.records.UpdateChain(ctx, r.rec, func(chain []*trajectory.Record) ([]trajectory.Event, error) {
			_, err := chain[0].EndTurn(trajectory.TurnOutcome{StopReason: "tool_use", ApprovalID: approvalID,
				ToolCalls: []trajectory.PendingCall{{ID: "toolu_1", Name: "Bash"}}}, time.Now())
			return nil, err
		})
		if err != nil {
			t.Errorf("recording the held turn: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (r *rig) vote(t *testing.T, h *approvals.Hold, approve bool) {
	t.Helper()
	if _, err := r.svc.Vote(context.Background(), h.Requests[0], approvals.Vote{Approver: "carol", Roles: []string{"secops"},
		Approve: approve, Via: approvals.ViaAdmin}); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) finalize(t *testing.T, exit trajectory.State, reason string) {
	t.Helper()
	if _, err := r.records.UpdateChain(context.Background(), r.rec, func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		_, err := chain[0].Finalize(exit, reason, time.Now())
		return nil, err
	}); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) state(t *testing.T) trajectory.State {
	t.Helper()
	rec, err := r.records.Get(context.Background(), r.rec)
	if err != nil {
		t.Fatal(err)
	}
	return rec.State
}

func (r *rig) delivered(t *testing.T, h *approvals.Hold) bool {
	t.Helper()
	got, err := r.apst.GetHold(context.Background(), h.ID)
	if err != nil {
		t.Fatal(err)
	}
	return got.Delivered
}

// TestAwaitEnds drives one step of a wait to each of its ends, and checks
// what each leaves of the hold and its record.
func TestAwaitEnds(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name      string
		onRefusal string
		before    func(t *testing.T, r *rig, h *approvals.Hold) // what happens before the wait
		ctx       context.Context
		client    func(c *Client) // the client's form and what it has
		end       End
		body      string // in the decided reply
		state     trajectory.State
		delivered bool
	}{
		{name: "undecided", end: Pending, state: trajectory.AwaitingApproval},
		{name: "approved", before: func(t *testing.T, r *rig, h *approvals.Hold) { r.vote(t, h, true) },
			end: Decided, body: `"name":"Bash"`, state: trajectory.WaitingTool, delivered: true},
		{name: "denied, the turn ends", onRefusal: config.OnRefusalEndTurn,
			before: func(t *testing.T, r *rig, h *approvals.Hold) { r.vote(t, h, false) },
			end:    Decided, body: "was refused and was not run", state: trajectory.Ready, delivered: true},
		{name: "denied, no way to continue", onRefusal: config.OnRefusalContinue,
			before: func(t *testing.T, r *rig, h *approvals.Hold) { r.vote(t, h, false) },
			end:    Decided, body: "was refused and was not run", state: trajectory.Ready, delivered: true},
		{name: "client gone though decided", before: func(t *testing.T, r *rig, h *approvals.Hold) { r.vote(t, h, true) },
			ctx: canceled, end: Gone, state: trajectory.AwaitingApproval},
		{name: "server closing", before: func(t *testing.T, r *rig, h *approvals.Hold) { close(r.closing) },
			end: Closing, state: trajectory.AwaitingApproval},
		{name: "canceled by an operator", before: func(t *testing.T, r *rig, h *approvals.Hold) {
			r.finalize(t, trajectory.Canceled, trajectory.ExitCanceled)
		}, end: Stopped, state: trajectory.Canceled},
		{name: "killed by an operator", before: func(t *testing.T, r *rig, h *approvals.Hold) {
			r.finalize(t, trajectory.Failed, trajectory.ExitKilled)
		}, end: Killed, state: trajectory.Failed},
		{name: "delivered elsewhere", before: func(t *testing.T, r *rig, h *approvals.Hold) {
			r.vote(t, h, true)
			if _, err := r.apst.UpdateHold(context.Background(), h.ID, func(h *approvals.Hold) error { h.Delivered = true; return nil }); err != nil {
				t.Fatal(err)
			}
		}, end: Elsewhere, state: trajectory.AwaitingApproval, delivered: true},
		{name: "records store down", before: func(t *testing.T, r *rig, h *approvals.Hold) { r.down.Store(true) },
			end: StoreDown, state: trajectory.AwaitingApproval},
		{name: "not what the stream's client has", before: func(t *testing.T, r *rig, h *approvals.Hold) { r.vote(t, h, true) },
			client: func(c *Client) { c.Form, c.Sent, c.Sum = FormStream, 5, 1 },
			// Released and delivered: it is not sent again.
			end: Unrenderable, state: trajectory.WaitingTool, delivered: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, tc.onRefusal)
			h := r.open(t)
			if tc.before != nil {
				tc.before(t, r, h)
			}
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			c := &Client{API: streaming.APIAnthropic, Form: FormJSON, Log: r.e.log}
			if tc.client != nil {
				tc.client(c)
			}
			a := r.e.Await(ctx, &Wait{Hold: h, Client: c})
			r.down.Store(false)
			if a.End != tc.end {
				t.Fatalf("end %d (%v), want %d", a.End, a.Err, tc.end)
			}
			if !strings.Contains(string(a.Body), tc.body) {
				t.Errorf("body %s, want it to contain %s", a.Body, tc.body)
			}
			if got := r.state(t); got != tc.state {
				t.Errorf("record %s, want %s", got, tc.state)
			}
			if got := r.delivered(t, h); got != tc.delivered {
				t.Errorf("hold delivered %v, want %v", got, tc.delivered)
			}
			if tc.end == Stopped && (a.Rec == nil || a.Rec.ID != r.rec) {
				t.Errorf("a stopped wait names record %+v", a.Rec)
			}
		})
	}
}

// A refused call with on_refusal continue is answered by the client's
// continuation, spliced into the held reply; its failure ends the turn
// with the refusal instead.
func TestAwaitContinuation(t *testing.T) {
	const cont = `{"id":"msg_2","type":"message","role":"assistant","model":"claude-sonnet-4-5",` +
		`"content":[{"type":"text","text":"Understood, I will not delete it."}],` +
		`"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":30,"output_tokens":8}}`
	for _, fail := range []bool{false, true} {
		r := newRig(t, config.OnRefusalContinue)
		h := r.open(t)
		r.vote(t, h, false)
		var sent []byte
		c := &Client{API: streaming.APIAnthropic, Form: FormJSON, Log: r.e.log,
			Continue: func(_ context.Context, got *approvals.Hold, body []byte, form Form) ([]byte, *approvals.Hold, error) {
				if got.ID != h.ID || form != FormJSON {
					t.Errorf("continuation of hold %s in form %d", got.ID, form)
				}
				sent = body
				if fail {
					return nil, nil, errors.New("provider down")
				}
				return []byte(cont), nil, nil
			}}
		a := awaitReply(t, r.e, c, h)
		if !bytes.Contains(sent, []byte(`"tool_use_id":"toolu_1"`)) || !bytes.Contains(sent, []byte("APPROVAL_DENIED")) {
			t.Errorf("continuation body carries no refusal: %s", sent)
		}
		want := "Understood, I will not delete it."
		if fail {
			want = "was refused and was not run"
		}
		if !strings.Contains(string(a), want) {
			t.Errorf("fail %v: reply %s, want %q in it", fail, a, want)
		}
	}
}

// awaitReply is AwaitJSON for a test that expects a reply.
func awaitReply(t *testing.T, e *Keeper, c *Client, h *approvals.Hold) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := e.AwaitJSON(ctx, &Wait{Hold: h, Client: c})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRenderForms renders one decided reply for a client of each form:
// whole, in its own form or the other, its refused call replaced by the
// text; and for the original stream, only what follows the bytes it has.
func TestRenderForms(t *testing.T) {
	d := anthropic.Dialect{}
	held := Reply{Form: FormJSON, Body: []byte(heldJSON)}
	refused := &Decision{Reply: held, Refuse: []string{"toolu_1"}, Texts: map[string]string{"toolu_1": "[gatekeeper] refused here"}}
	released := &Decision{Reply: held}
	stream, err := held.As(d, FormStream)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		dr        *Decision
		form      Form
		want, not string
	}{
		{"released as JSON", released, FormJSON, `"tool_use"`, "refused here"},
		{"released as a stream", released, FormStream, "event: content_block_start", "refused here"},
		{"refused as JSON", refused, FormJSON, "refused here", `"tool_use"`},
		{"refused as a stream", refused, FormStream, "refused here", `"tool_use"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Render(d, tc.dr, &Client{API: streaming.APIAnthropic, Form: tc.form})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(out), tc.want) || strings.Contains(string(out), tc.not) {
				t.Fatalf("rendered:\n%s\nwant %q in it and not %q", out, tc.want, tc.not)
			}
			if tc.form == FormStream && !bytes.HasPrefix(out, []byte("event: message_start")) {
				t.Errorf("a whole stream does not begin with message_start:\n%s", out)
			}
		})
	}

	// The original client has the stream's first event: it gets the rest.
	whole, err := Render(d, released, &Client{API: streaming.APIAnthropic, Form: FormStream})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(whole, stream) {
		t.Fatalf("the released stream is not the held reply rendered:\n%s\nwant:\n%s", whole, stream)
	}
	first := bytes.Index(whole, []byte("\n\n")) + 2
	rest, err := Render(d, released, &Client{API: streaming.APIAnthropic, Form: FormStream, Sent: first, Sum: crc32.ChecksumIEEE(whole[:first])})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rest, whole[first:]) {
		t.Fatalf("rest of the stream:\n%s\nwant:\n%s", rest, whole[first:])
	}
	// A client whose bytes are not the reply's beginning gets nothing.
	if _, err := Render(d, released, &Client{API: streaming.APIAnthropic, Form: FormStream, Sent: first, Sum: 1}); !errors.Is(err, errPrefixMismatch) {
		t.Fatalf("mismatched prefix: %v", err)
	}
}

// A stream's escrow keeps what it is given up to its limit, and counts
// what the client was handed; attaching the client hands it over.
func TestStreamState(t *testing.T) {
	e := &Keeper{maxHeld: 10}
	s := e.NewStream()
	s.Keep([]byte("12345"))
	s.Forwarded([]byte("12345"))
	if s.TooLarge() || s.Holding() || s.Phase() != Forward || string(s.Reply().Body) != "12345" {
		t.Fatalf("stream %+v", s)
	}
	s.Escrow([]Gated{{Call: streaming.ToolCall{ID: "a"}}})
	if !s.Holding() || s.Phase() != Escrowed {
		t.Fatalf("escrowed stream %+v", s)
	}
	if g := s.Gated(nil); len(g) != 1 || g[0].Call.ID != "a" {
		t.Fatalf("gated %+v", g)
	}
	if g := s.Gated([]Gated{{Call: streaming.ToolCall{ID: "a"}}, {Call: streaming.ToolCall{ID: "b"}}}); len(g) != 2 {
		t.Fatalf("regated %+v", g)
	}
	s.Keep([]byte("123456")) // past the limit: the reply is dropped
	if !s.TooLarge() || s.Reply().Body != nil {
		t.Fatalf("over the limit: %+v", s)
	}
	c := &Client{}
	h := &approvals.Hold{ID: "hold_1"}
	s.Attach(h, c)
	if c.Sent != 5 || c.Sum != crc32.ChecksumIEEE([]byte("12345")) || s.Phase() != Waiting || s.Wait().Hold != h || s.Wait().Client != c {
		t.Fatalf("attached: client %+v, stream %+v", c, s)
	}
	s.End()
	if s.Holding() || s.Phase() != Done {
		t.Fatalf("ended: %+v", s)
	}
}

// Find names the hold a retry re-attaches to, none for another turn or,
// while the record is still calling the model, for a hold already decided
// or delivered; a delivered hold's retry is refused.
func TestFind(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, config.OnRefusalEndTurn)
	h := r.open(t)
	if got, err := r.e.Find(ctx, r.rec, "turn_other", false); got != nil || err != nil {
		t.Fatalf("another turn: %v, %v", got, err)
	}
	for _, opening := range []bool{false, true} {
		if got, err := r.e.Find(ctx, r.rec, "turn_k", opening); err != nil || got == nil || got.ID != h.ID {
			t.Fatalf("opening %v: %v, %v", opening, got, err)
		}
	}
	if _, err := r.apst.UpdateHold(ctx, h.ID, func(h *approvals.Hold) error { h.Delivered = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if got, err := r.e.Find(ctx, r.rec, "turn_k", true); got != nil || err != nil {
		t.Fatalf("delivered, opening: %v, %v", got, err)
	}
	var ans *Answer
	if got, err := r.e.Find(ctx, r.rec, "turn_k", false); got != nil || !errors.As(err, &ans) || ans.Status != 409 {
		t.Fatalf("delivered: %v, %v", got, err)
	}
}

// Gated judges only the complete client calls the reply delivers, and a
// call whose arguments are not JSON on its raw text: the gate that could
// match it holds it.
func TestGated(t *testing.T) {
	r := newRig(t, "")
	call := func(id, args string) streaming.ToolCall {
		return streaming.ToolCall{ID: id, Name: "Bash", Arguments: []byte(args), Complete: true}
	}
	none := func(string) bool { return false }
	tests := []struct {
		name     string
		calls    []streaming.ToolCall
		tenant   string
		withheld func(string) bool
		want     []string
	}{
		{"matched", []streaming.ToolCall{call("a", `{"command":"rm -rf /"}`), call("b", `{"command":"ls"}`)}, "team-a", none, []string{"a"}},
		{"another tenant", []streaming.ToolCall{call("a", `{"command":"rm -rf /"}`)}, "team-b", none, nil},
		{"withheld", []streaming.ToolCall{call("a", `{"command":"rm -rf /"}`)}, "team-a", func(id string) bool { return id == "a" }, nil},
		{"incomplete", []streaming.ToolCall{{ID: "a", Name: "Bash", Arguments: []byte(`{"command":"rm -rf /"}`)}}, "team-a", none, nil},
		{"server tool", []streaming.ToolCall{{ID: "a", Name: "Bash", Arguments: []byte(`{"command":"rm -rf /"}`), Complete: true, Server: true}}, "team-a", none, nil},
		{"arguments not JSON", []streaming.ToolCall{call("a", `{"command":"rm -rf /"`)}, "team-a", none, []string{"a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := r.e.Gated(&streaming.Result{ToolCalls: tc.calls}, approvals.Input{Tenant: tc.tenant}, tc.withheld)
			var ids []string
			for _, g := range got {
				ids = append(ids, g.Call.ID)
				if g.Gate == nil || g.Gate.Name != "destructive-shell" {
					t.Errorf("call %s gated by %+v", g.Call.ID, g.Gate)
				}
			}
			if strings.Join(ids, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("gated %v, want %v", ids, tc.want)
			}
		})
	}
}

// The same call held again after it was refused, before the refusal
// expired, is the turn's next hold, its request refused at once.
func TestOpenRefusedBefore(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, config.OnRefusalEndTurn)
	first := r.open(t)
	r.vote(t, first, false)
	c := &Client{API: streaming.APIAnthropic, Form: FormJSON, Log: r.e.log}
	if a := r.e.Await(ctx, &Wait{Hold: first, Client: c}); a.End != Decided {
		t.Fatalf("first hold: end %d (%v)", a.End, a.Err)
	}
	if _, err := r.records.UpdateChain(ctx, r.rec, func(chain []*trajectory.Record) ([]trajectory.Event, error) {
		_, err := chain[0].BeginTurn(time.Now())
		return nil, err
	}); err != nil {
		t.Fatal(err)
	}
	next := r.open(t)
	if next.Generation != 2 || next.Previous != first.ID {
		t.Fatalf("next hold: generation %d, previous %q; want 2, %q", next.Generation, next.Previous, first.ID)
	}
	req, err := r.apst.Get(ctx, next.Requests[0])
	if err != nil {
		t.Fatal(err)
	}
	if req.State != approvals.Denied || !strings.Contains(req.Reason, first.Requests[0]) {
		t.Fatalf("request %s (%s), want denied naming %s", req.State, req.Reason, first.Requests[0])
	}
	a := r.e.Await(ctx, &Wait{Hold: next, Client: c})
	if a.End != Decided || !strings.Contains(string(a.Body), "was refused and was not run") {
		t.Fatalf("next hold: end %d, body %s", a.End, a.Body)
	}
}
