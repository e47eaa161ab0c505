package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"gatekeeper/admin"
	"gatekeeper/store/memory"
	"gatekeeper/trajectory"
)

var controlNow = time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)

// put creates a record in state s directly in the store; its parent is
// what its id names before the last '/'. calls become pending tool calls.
func put(t *testing.T, st *memory.Store, id string, s trajectory.State, calls ...string) {
	t.Helper()
	r := trajectory.New(id, "team-a", controlNow.Add(-time.Hour))
	if i := strings.LastIndexByte(id, '/'); i >= 0 {
		r.ParentID = id[:i]
	}
	r.State = s
	r.StartedAt = controlNow.Add(-time.Hour)
	for _, c := range calls {
		r.Pending.ToolCalls = append(r.Pending.ToolCalls, trajectory.PendingCall{ID: c, Name: "Bash"})
	}
	if s.Terminal() {
		r.ExitReason = "earlier"
	}
	if s == trajectory.Paused {
		r.HeldSince = controlNow.Add(-time.Minute)
	}
	if err := st.Create(context.Background(), r); err != nil {
		t.Fatal(err)
	}
}

// subscribe collects the signals published while the test runs.
func subscribe(t *testing.T, st *memory.Store) func() []trajectory.Signal {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := st.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Publish runs before the handler answers, so what was sent is in the
	// channel by the time the test reads it.
	return func() []trajectory.Signal {
		var out []trajectory.Signal
		for {
			select {
			case s := <-ch:
				out = append(out, s)
			default:
				return out
			}
		}
	}
}

type event struct {
	Type string          `json:"type"`
	From string          `json:"from"`
	To   string          `json:"to"`
	Data json.RawMessage `json:"data"`
}

type controlData struct {
	Kind    string `json:"kind"`
	By      string `json:"by"`
	Message string `json:"message"`
	Reason  string `json:"reason"`
	Applied bool   `json:"applied"`
	Pending bool   `json:"pending"`
	Target  string `json:"target"`
}

func events(t *testing.T, base, id string) []event {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/admin/v1/trajectories/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+opToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Events []event }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("events of %s: %d %v", id, resp.StatusCode, err)
	}
	return out.Events
}

func types(evs []event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
		if e.Type == "transition" {
			out[i] = e.From + ">" + e.To
		}
	}
	return out
}

func controlOf(t *testing.T, e event) controlData {
	t.Helper()
	var d controlData
	if e.Type != "control" || json.Unmarshal(e.Data, &d) != nil {
		t.Fatalf("not a control event: %+v", e)
	}
	return d
}

func TestControlVerbs(t *testing.T) {
	base, st := setup(t)
	signals := subscribe(t, st)
	const (
		ready   = trajectory.Ready
		waiting = trajectory.WaitingTool
		calling = trajectory.CallingModel
		paused  = trajectory.Paused
	)
	type want struct {
		status  int
		state   trajectory.State
		exit    string // "" for none
		pending string // the pending control's kind afterwards
		applied bool
		events  []string // after the control event
	}
	noop := func(s trajectory.State) want { return want{status: 202, state: s} }
	pend := func(s trajectory.State, k string) want { return want{status: 202, state: s, pending: k} }
	end := func(from, to trajectory.State, exit string, extra ...string) want {
		return want{status: 202, state: to, exit: exit, applied: true,
			events: append([]string{string(from) + ">FINALIZING", "FINALIZING>" + string(to)}, extra...)}
	}
	gone := want{status: 409}
	tests := []struct {
		verb string
		from trajectory.State
		want want
	}{
		{"pause", ready, want{status: 202, state: paused, applied: true, events: []string{"READY>PAUSED"}}},
		{"pause", waiting, pend(waiting, "pause")},
		{"pause", calling, pend(calling, "pause")},
		{"pause", paused, noop(paused)},
		{"pause", trajectory.Completed, gone},
		{"resume", ready, noop(ready)},
		{"resume", waiting, noop(waiting)},
		{"resume", calling, noop(calling)},
		{"resume", paused, want{status: 202, state: ready, applied: true, events: []string{"PAUSED>READY"}}},
		{"resume", trajectory.Completed, gone},
		{"cancel", ready, end(ready, trajectory.Canceled, "CANCELED")},
		{"cancel", waiting, end(waiting, trajectory.Canceled, "CANCELED", "tool_calls_in_doubt")},
		{"cancel", calling, pend(calling, "cancel")},
		{"cancel", paused, end(paused, trajectory.Canceled, "CANCELED")},
		{"cancel", trajectory.Canceled, gone},
		{"kill", ready, end(ready, trajectory.Failed, "KILLED")},
		{"kill", waiting, end(waiting, trajectory.Failed, "KILLED", "tool_calls_in_doubt")},
		{"kill", calling, end(calling, trajectory.Failed, "KILLED")},
		{"kill", paused, end(paused, trajectory.Failed, "KILLED")},
		{"kill", trajectory.Failed, gone},
		{"finish", ready, end(ready, trajectory.Completed, "FINISHED")},
		{"finish", waiting, end(waiting, trajectory.Completed, "FINISHED", "tool_calls_in_doubt")},
		{"finish", calling, pend(calling, "finish")},
		{"finish", paused, end(paused, trajectory.Completed, "FINISHED")},
		{"finish", trajectory.Completed, gone},
		{"interrupt", ready, pend(ready, "interrupt")},
		{"interrupt", waiting, pend(waiting, "interrupt")},
		{"interrupt", calling, pend(calling, "interrupt")},
		{"interrupt", paused, pend(paused, "interrupt")},
		{"interrupt", trajectory.Completed, gone},
	}
	for _, tc := range tests {
		t.Run(tc.verb+" in "+string(tc.from), func(t *testing.T) {
			id := "v-" + tc.verb + "-" + strings.ToLower(string(tc.from))
			var calls []string
			if tc.from == waiting {
				calls = []string{"toolu_1", "toolu_2"}
			}
			put(t, st, id, tc.from, calls...)
			body, msg := "", ""
			if tc.verb == "interrupt" {
				msg = "wrap up and write the summary"
				body = `{"message":"` + msg + `"}`
			}
			status, out := call(t, "POST", base+"/admin/v1/trajectories/"+id+"/"+tc.verb, opToken, body)
			if status != tc.want.status {
				t.Fatalf("status %d, want %d: %v", status, tc.want.status, out)
			}
			got := signals()
			if status == 409 {
				if e, _ := out["error"].(map[string]any); e["type"] != "conflict_error" || !strings.Contains(e["message"].(string), "finished") {
					t.Errorf("409 body %v", out)
				}
				if evs := events(t, base, id); len(evs) != 0 {
					t.Errorf("a finished record got events %v", types(evs))
				}
				if len(got) != 0 {
					t.Errorf("signals %v for a finished record", got)
				}
				return
			}
			if out["id"] != id || out["state"] != string(tc.want.state) {
				t.Errorf("answered %v %v, want %s %s", out["id"], out["state"], id, tc.want.state)
			}
			if exit, _ := out["exit_reason"].(string); exit != tc.want.exit {
				t.Errorf("exit reason %q, want %q", exit, tc.want.exit)
			}
			ctl, _ := out["pending"].(map[string]any)["control"].(map[string]any)
			if kind, _ := ctl["kind"].(string); kind != tc.want.pending {
				t.Errorf("pending control %v, want kind %q", ctl, tc.want.pending)
			}
			if ctl != nil && (ctl["by"] != "alice" || ctl["message"] != nilIfEmpty(msg)) {
				t.Errorf("pending control %v, want by alice, message %q", ctl, msg)
			}
			evs := events(t, base, id)
			if len(evs) == 0 {
				t.Fatal("no event recorded")
			}
			d := controlOf(t, evs[0])
			wantD := controlData{Kind: tc.verb, By: "alice", Message: msg, Applied: tc.want.applied, Pending: tc.want.pending != ""}
			if d != wantD {
				t.Errorf("control event %+v, want %+v", d, wantD)
			}
			if rest := types(evs[1:]); !slices.Equal(rest, tc.want.events) {
				t.Errorf("events after the control %v, want %v", rest, tc.want.events)
			}
			if last := evs[len(evs)-1]; last.Type == "tool_calls_in_doubt" {
				var dd struct {
					Calls []struct{ ID, Name string }
				}
				if err := json.Unmarshal(last.Data, &dd); err != nil || len(dd.Calls) != 2 || dd.Calls[0].ID != "toolu_1" ||
					dd.Calls[1].ID != "toolu_2" || dd.Calls[0].Name != "Bash" {
					t.Errorf("in-doubt data %s", last.Data)
				}
			}
			var wantSig []trajectory.Signal
			if tc.want.applied || tc.want.pending != "" {
				wantSig = []trajectory.Signal{{ID: id, Kind: trajectory.ControlKind(tc.verb)}}
			}
			if !slices.Equal(got, wantSig) {
				t.Errorf("signals %v, want %v", got, wantSig)
			}
		})
	}
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func TestControlRequests(t *testing.T) {
	base, st := setup(t)
	put(t, st, "run-c", trajectory.CallingModel)
	put(t, st, "run-c/sub", trajectory.Ready)
	put(t, st, "run-done", trajectory.Completed)
	put(t, st, "run-done/live", trajectory.Ready)
	path := func(id, verb string) string { return "/admin/v1/trajectories/" + id + "/" + verb }
	long := strings.Repeat("x", 32<<10)
	cases := []struct {
		name, path, token, body string
		status                  int
		errType                 string
	}{
		{"no token", path("run-c", "pause"), "", "", 401, "authentication_error"},
		{"approver is not an operator", path("run-c", "pause"), apprToken, "", 403, "permission_error"},
		{"unknown trajectory", path("nope", "pause"), opToken, "", 404, "not_found_error"},
		{"unknown child", path("run-c/nope", "kill"), opToken, "", 404, "not_found_error"},
		{"unknown verb", path("run-c", "suspend"), opToken, "", 404, "not_found_error"},
		{"no verb", "/admin/v1/trajectories/run-c", opToken, "", 404, "not_found_error"},
		{"finished target", path("run-done", "cancel"), opToken, "", 409, "conflict_error"},
		{"interrupt without body", path("run-c", "interrupt"), opToken, "", 400, "invalid_request_error"},
		{"interrupt with empty message", path("run-c", "interrupt"), opToken, `{"message":""}`, 400, "invalid_request_error"},
		{"interrupt with blank message", path("run-c", "interrupt"), opToken, `{"message":" \n\t"}`, 400, "invalid_request_error"},
		{"interrupt message too long", path("run-c", "interrupt"), opToken, `{"message":"` + long + `y"}`, 400, "invalid_request_error"},
		{"interrupt unknown field", path("run-c", "interrupt"), opToken, `{"message":"hi","urgent":true}`, 400, "invalid_request_error"},
		{"interrupt not an object", path("run-c", "interrupt"), opToken, `"hi"`, 400, "invalid_request_error"},
		{"two objects", path("run-c", "interrupt"), opToken, `{"message":"a"}{"message":"b"}`, 400, "invalid_request_error"},
		{"pause with a message", path("run-c", "pause"), opToken, `{"message":"hi"}`, 400, "invalid_request_error"},
		{"reason too long", path("run-c", "pause"), opToken, `{"reason":"` + strings.Repeat("r", 1025) + `"}`, 400, "invalid_request_error"},
		{"interrupt at the size limit", path("run-c", "interrupt"), opToken, `{"message":"` + long + `"}`, 202, ""},
		{"pause with empty object", path("run-c", "pause"), opToken, `{}`, 202, ""},
		{"pause with a reason", path("run-c", "pause"), opToken, `{"reason":"runaway loop"}`, 202, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, out := call(t, "POST", base+tc.path, tc.token, tc.body)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %v", status, tc.status, out)
			}
			if tc.errType != "" {
				if e, _ := out["error"].(map[string]any); e["type"] != tc.errType || e["message"] == "" {
					t.Errorf("error body %v, want type %s", out, tc.errType)
				}
			}
		})
	}
	// Refused requests left no trace; accepted ones did, in order.
	var got []controlData
	for _, e := range events(t, base, "run-c") {
		got = append(got, controlOf(t, e))
	}
	want := []controlData{
		{Kind: "interrupt", By: "alice", Message: long, Pending: true},
		{Kind: "pause", By: "alice", Pending: true},
		{Kind: "pause", By: "alice", Reason: "runaway loop", Pending: true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("run-c control events: %d, want %d\n%+v", len(got), len(want), got)
	}
	// A finished target stops the request before its subtree.
	if evs := events(t, base, "run-done/live"); len(evs) != 0 {
		t.Errorf("child of a finished target got %v", types(evs))
	}
}

func TestControlCascade(t *testing.T) {
	base, st := setup(t)
	signals := subscribe(t, st)
	// root ─┬─ root/a (waiting on tools) ── root/a/y (calling the model)
	//       └─ root/b (finished)         ── root/b/x (ready)
	put(t, st, "root", trajectory.Ready)
	put(t, st, "root/a", trajectory.WaitingTool, "toolu_a")
	put(t, st, "root/b", trajectory.Completed)
	put(t, st, "root/a/y", trajectory.CallingModel)
	put(t, st, "root/b/x", trajectory.Ready)
	ctx := context.Background()
	state := func(id string) (trajectory.State, string) {
		r, err := st.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		k := ""
		if r.Pending.Control != nil {
			k = string(r.Pending.Control.Kind)
		}
		return r.State, k
	}
	type row struct {
		state   trajectory.State
		pending string
	}
	steps := []struct {
		verb    string
		want    map[string]row
		signals []string
	}{
		{"pause", map[string]row{"root": {trajectory.Paused, ""}, "root/a": {trajectory.WaitingTool, "pause"},
			"root/a/y": {trajectory.CallingModel, "pause"}, "root/b": {trajectory.Completed, ""}, "root/b/x": {trajectory.Paused, ""}},
			[]string{"root/a", "root/a/y", "root/b/x", "root"}},
		{"resume", map[string]row{"root": {trajectory.Ready, ""}, "root/a": {trajectory.WaitingTool, ""},
			"root/a/y": {trajectory.CallingModel, ""}, "root/b": {trajectory.Completed, ""}, "root/b/x": {trajectory.Ready, ""}},
			[]string{"root/a", "root/a/y", "root/b/x", "root"}},
		{"resume", map[string]row{"root": {trajectory.Ready, ""}, "root/a": {trajectory.WaitingTool, ""},
			"root/a/y": {trajectory.CallingModel, ""}, "root/b": {trajectory.Completed, ""}, "root/b/x": {trajectory.Ready, ""}},
			nil},
		{"kill", map[string]row{"root": {trajectory.Failed, ""}, "root/a": {trajectory.Failed, ""},
			"root/a/y": {trajectory.Failed, ""}, "root/b": {trajectory.Completed, ""}, "root/b/x": {trajectory.Failed, ""}},
			[]string{"root/a", "root/a/y", "root/b/x", "root"}},
	}
	for _, s := range steps {
		status, out := call(t, "POST", base+"/admin/v1/trajectories/root/"+s.verb, opToken, "")
		if status != 202 || out["id"] != "root" {
			t.Fatalf("%s: %d %v", s.verb, status, out)
		}
		for id, w := range s.want {
			if st, k := state(id); st != w.state || k != w.pending {
				t.Errorf("after %s: %s is %s pending %q, want %s %q", s.verb, id, st, k, w.state, w.pending)
			}
		}
		var ids []string
		for _, sig := range signals() {
			if string(sig.Kind) != s.verb {
				t.Errorf("after %s: signal %+v", s.verb, sig)
			}
			ids = append(ids, sig.ID)
		}
		if !slices.Equal(ids, s.signals) {
			t.Errorf("after %s: signals for %v, want %v", s.verb, ids, s.signals)
		}
	}
	if evs := events(t, base, "root/b"); len(evs) != 0 {
		t.Errorf("the finished child got events %v", types(evs))
	}
	evs := events(t, base, "root/a")
	if got, want := types(evs), []string{"control", "control", "control", "control", "WAITING_TOOL>FINALIZING",
		"FINALIZING>FAILED", "tool_calls_in_doubt"}; !slices.Equal(got, want) {
		t.Errorf("root/a events %v, want %v", got, want)
	}
	if d := controlOf(t, evs[0]); d.Target != "root" || d.Kind != "pause" || !d.Pending {
		t.Errorf("descendant's control event %+v", d)
	}
	if d := controlOf(t, events(t, base, "root")[0]); d.Target != "" || !d.Applied {
		t.Errorf("target's control event %+v", d)
	}
	// The whole tree is finished now: the next request is a conflict.
	if status, _ := call(t, "POST", base+"/admin/v1/trajectories/root/cancel", opToken, ""); status != 409 {
		t.Errorf("cancel of a killed tree: %d", status)
	}
}

func TestControlChildID(t *testing.T) {
	base, st := setup(t)
	put(t, st, "run-1", trajectory.Ready)
	put(t, st, "run-1/3f9a", trajectory.Ready)
	put(t, st, "run-1/3f9a/pause", trajectory.Ready) // a child whose last segment is a verb
	for _, tc := range []struct{ path, id string }{
		{"/admin/v1/trajectories/run-1/3f9a/pause/pause", "run-1/3f9a/pause"},
		{"/admin/v1/trajectories/run-1%2F3f9a/pause", "run-1/3f9a"},
	} {
		status, out := call(t, "POST", base+tc.path, opToken, "")
		if status != 202 || out["id"] != tc.id || out["state"] != "PAUSED" {
			t.Errorf("POST %s: %d %v", tc.path, status, out)
		}
	}
	// A request on a child leaves its parent alone.
	if r, err := st.Get(context.Background(), "run-1"); err != nil || r.State != trajectory.Ready {
		t.Errorf("parent %+v %v", r, err)
	}
	// Reading still works beside the control routes.
	if status, out := call(t, "GET", base+"/admin/v1/trajectories/run-1/3f9a/pause", opToken, ""); status != 200 || out["id"] != "run-1/3f9a/pause" {
		t.Errorf("GET child named pause: %d %v", status, out)
	}
}

// failingPublisher is a signal transport that is down.
type failingPublisher struct{ calls int }

func (p *failingPublisher) Publish(context.Context, trajectory.Signal) error {
	p.calls++
	return errors.New("transport down")
}

func TestControlSignalsOptional(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []admin.Option
		pub  *failingPublisher
	}{
		{name: "no signals"},
		{name: "nil signals", opts: []admin.Option{admin.WithSignals(nil)}},
		{name: "publish fails", pub: &failingPublisher{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := memory.New(memory.Options{})
			opts := tc.opts
			if tc.pub != nil {
				opts = append(opts, admin.WithSignals(tc.pub))
			}
			r := chi.NewRouter()
			admin.New(testConfig(t), st, nil, func() time.Time { return controlNow }, opts...).Routes(r)
			srv := httptest.NewServer(r)
			defer srv.Close()
			put(t, st, "run-1", trajectory.CallingModel)
			status, out := call(t, "POST", srv.URL+"/admin/v1/trajectories/run-1/cancel", opToken, "")
			if status != 202 || out["pending"].(map[string]any)["control"] == nil {
				t.Fatalf("%d %v", status, out)
			}
			if tc.pub != nil && tc.pub.calls != 1 {
				t.Errorf("published %d times, want 1", tc.pub.calls)
			}
		})
	}
}

func TestControlCascadeBound(t *testing.T) {
	base, st := setup(t)
	put(t, st, "wide", trajectory.Ready)
	const children = 10_001 // one more than a request walks
	for i := range children {
		put(t, st, "wide/c"+strconv.Itoa(i), trajectory.Ready)
	}
	if status, out := call(t, "POST", base+"/admin/v1/trajectories/wide/pause", opToken, ""); status != 202 || out["state"] != "PAUSED" {
		t.Fatalf("%d %v", status, out)
	}
	paused := 0
	for i := range children {
		r, err := st.Get(context.Background(), "wide/c"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		if r.State == trajectory.Paused {
			paused++
		}
	}
	if paused != children-1 {
		t.Errorf("%d descendants paused, want %d", paused, children-1)
	}
	last, err := st.Get(context.Background(), "wide/c"+strconv.Itoa(children-1))
	if err != nil || last.State != trajectory.Ready {
		t.Errorf("the descendant past the bound: %+v %v", last, err)
	}
	first, err := st.Get(context.Background(), "wide/c"+strconv.Itoa(children-2))
	if err != nil || first.State != trajectory.Paused {
		t.Errorf("the last descendant within the bound: %+v %v", first, err)
	}
}

// states records the state changes the API reports.
type states struct{ moves []string }

func (s *states) StateChanged(tenant, from, to string) {
	s.moves = append(s.moves, tenant+":"+from+">"+to)
}

func TestControlReportsStateChanges(t *testing.T) {
	st := memory.New(memory.Options{})
	obs := &states{}
	r := chi.NewRouter()
	admin.New(testConfig(t), st, nil, func() time.Time { return controlNow }, admin.WithStateObserver(obs)).Routes(r)
	srv := httptest.NewServer(r)
	defer srv.Close()
	put(t, st, "run-1", trajectory.Ready)
	if status, out := call(t, "POST", srv.URL+"/admin/v1/trajectories/run-1/cancel", opToken, ""); status != 202 {
		t.Fatalf("%d %v", status, out)
	}
	want := []string{"team-a:READY>FINALIZING", "team-a:FINALIZING>CANCELED"}
	if strings.Join(obs.moves, " ") != strings.Join(want, " ") {
		t.Errorf("reported %v, want %v", obs.moves, want)
	}
}
