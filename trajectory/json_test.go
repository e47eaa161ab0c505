package trajectory

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// contractRecord is an example record of the admin API.
func contractRecord() *Record {
	r := New("run-42", "team-a", t0)
	r.State = WaitingTool
	r.Turns = 7
	r.LastStopReason = "tool_use"
	r.UpdatedAt = t0.Add(7*time.Minute + 30*time.Second)
	r.Budget = Budget{Turns: 200, Tokens: 5000000, WallClockS: 7200, Dollars: 20}
	r.Spend = Spend{Turns: 7}
	r.BudgetUsed = 0.035
	r.BindingDimension = "turns"
	r.Pending.ToolCalls = []PendingCall{{ID: "toolu_01", Name: "Bash", Deadline: r.UpdatedAt.Add(10 * time.Minute)}}
	r.Children = []string{"run-42/3f9a"}
	return r
}

func TestRecordJSONGolden(t *testing.T) {
	want, err := os.ReadFile("testdata/record.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(contractRecord(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSpace(got), bytes.TrimSpace(want)) {
		t.Errorf("record JSON differs from testdata/record.golden.json:\n%s", got)
	}
}

// keys returns the top-level keys of a JSON object, in order of appearance.
func keys(t *testing.T, b []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", b)
	}
	var out []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestRecordJSONEmptyFields(t *testing.T) {
	b, err := json.Marshal(New("run-1", "team-a", t0))
	if err != nil {
		t.Fatal(err)
	}
	wantKeys := []string{"id", "parent_id", "tenant", "state", "exit_reason", "turns", "last_stop_reason",
		"created_at", "updated_at", "budget", "spend", "budget_used", "binding_dimension", "stage", "pending", "children"}
	if got := keys(t, b); !slices.Equal(got, wantKeys) {
		t.Errorf("keys %v, want %v", got, wantKeys)
	}
	s := string(b)
	for _, frag := range []string{
		`"parent_id":null`, `"exit_reason":null`, `"children":[]`, `"stage":"nominal"`, `"state":"READY"`,
		`"pending":{"tool_calls":[],"approval_id":null,"control":null}`,
	} {
		if !strings.Contains(s, frag) {
			t.Errorf("missing %s in %s", frag, s)
		}
	}
}

func TestRecordJSONOptionalFields(t *testing.T) {
	r := contractRecord()
	r.ParentID = "run-41"
	r.ExitReason = "BUDGET_EXCEEDED"
	r.Pending.ApprovalID = "appr-1"
	r.Pending.Control = &Control{Kind: ControlInterrupt, Message: "stop and summarize", By: "alice", At: t0}
	r.Pending.ToolCalls = append(r.Pending.ToolCalls, PendingCall{ID: "toolu_02", Name: "Read"})
	r.Thread, r.Provider, r.Model, r.StartedAt = "agent-7", "anthropic", "claude-sonnet-4-5", t0
	r.HeldSince, r.WaitedS = t0.Add(time.Minute), 12.5
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, frag := range []string{
		`"parent_id":"run-41"`, `"exit_reason":"BUDGET_EXCEEDED"`, `"approval_id":"appr-1"`,
		`"control":{"kind":"interrupt","message":"stop and summarize","by":"alice","at":"2026-12-02T10:00:00Z"}`,
		`{"id":"toolu_02","name":"Read","deadline":null}`,
		`"thread":"agent-7"`, `"provider":"anthropic"`, `"model":"claude-sonnet-4-5"`, `"started_at":"2026-12-02T10:00:00Z"`,
		`"held_since":"2026-12-02T10:01:00Z"`, `"waited_s":12.5`,
	} {
		if !strings.Contains(s, frag) {
			t.Errorf("missing %s in %s", frag, s)
		}
	}
}

func TestRecordJSONRoundTrip(t *testing.T) {
	full := contractRecord()
	full.ParentID, full.ExitReason, full.State = "p", "killed", Canceled
	full.Pending.ApprovalID = "appr"
	full.Pending.Control = &Control{Kind: ControlKill, At: t0}
	full.Pending.ToolCalls = append(full.Pending.ToolCalls, PendingCall{ID: "no-deadline", Name: "X"})
	full.Spend = Spend{Turns: 1, InputTokens: 2, CachedInputTokens: 3, CacheWriteTokens: 4, OutputTokens: 5, Dollars: 0.125, WallClockS: 1.5, Estimated: true}
	full.Thread, full.Provider, full.Model, full.StartedAt = "th", "openai", "gpt-5", t0
	full.HeldSince, full.WaitedS = t0.Add(time.Second), 0.25
	full.Person = &Person{Subject: "00u1", Name: "Ada", Email: "ada@example.com", Groups: []string{"eng", "oncall"}}
	tests := []struct {
		name string
		rec  *Record
	}{
		{"fresh", New("run-1", "team-a", t0)},
		{"contract example", contractRecord()},
		{"every field", full},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.rec)
			if err != nil {
				t.Fatal(err)
			}
			var got Record
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(&got, tc.rec) {
				t.Errorf("round trip:\n got %+v\nwant %+v", &got, tc.rec)
			}
		})
	}
}

func TestRecordJSONRejects(t *testing.T) {
	tests := []struct {
		name string
		in   string
		is   error
	}{
		{"unknown state", `{"id":"a","state":"RUNNING"}`, ErrInvalidRecord},
		{"missing state", `{"id":"a"}`, ErrInvalidRecord},
		{"not an object", `[]`, nil},
		{"bad time", `{"id":"a","state":"READY","created_at":"yesterday"}`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Record{ID: "keep"}
			err := json.Unmarshal([]byte(tc.in), &r)
			if err == nil {
				t.Fatal("accepted")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("err = %v, want %v", err, tc.is)
			}
			if r.ID != "keep" {
				t.Errorf("failed decode changed the record: %+v", r)
			}
		})
	}
}

func TestEventJSON(t *testing.T) {
	evs := EventsFor("run-1", []Transition{{Ready, CallingModel, "turn admitted", t0}})
	evs[0].Seq = 3
	b, err := json.Marshal(evs[0])
	if err != nil {
		t.Fatal(err)
	}
	want := `{"seq":3,"at":"2026-12-02T10:00:00Z","trajectory":"run-1","type":"transition","from":"READY","to":"CALLING_MODEL","reason":"turn admitted"}`
	if string(b) != want {
		t.Errorf("event JSON\n got %s\nwant %s", b, want)
	}
	ev := Event{Seq: 4, At: t0, Trajectory: "run-1", Type: EventTurn, Data: json.RawMessage(`{"output_tokens":3}`)}
	b, err = json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	want = `{"seq":4,"at":"2026-12-02T10:00:00Z","trajectory":"run-1","type":"turn","data":{"output_tokens":3}}`
	if string(b) != want {
		t.Errorf("event JSON\n got %s\nwant %s", b, want)
	}
}

func TestEventsFor(t *testing.T) {
	if evs := EventsFor("x", nil); evs != nil {
		t.Errorf("EventsFor(nil) = %v", evs)
	}
	ts := []Transition{{Ready, Finalizing, "cancel", t0}, {Finalizing, Canceled, "cancel", t0.Add(time.Second)}}
	want := []Event{
		{At: t0, Trajectory: "run-1", Type: EventTransition, From: Ready, To: Finalizing, Reason: "cancel"},
		{At: t0.Add(time.Second), Trajectory: "run-1", Type: EventTransition, From: Finalizing, To: Canceled, Reason: "cancel"},
	}
	if got := EventsFor("run-1", ts); !reflect.DeepEqual(got, want) {
		t.Errorf("EventsFor = %+v, want %+v", got, want)
	}
}

func FuzzRecordJSON(f *testing.F) {
	for _, r := range []*Record{New("a", "t", t0), contractRecord()} {
		b, err := json.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"id":"a","state":"READY","pending":{"tool_calls":[{"id":"x","deadline":null}]},"children":null}`))
	f.Add([]byte(`{"state":"COMPLETED","parent_id":"","exit_reason":""}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var r Record
		if err := json.Unmarshal(in, &r); err != nil {
			return
		}
		if !r.State.Valid() {
			t.Fatalf("decoded a record with state %q", r.State)
		}
		b, err := json.Marshal(&r)
		if err != nil {
			t.Fatalf("re-encoding a decoded record: %v", err)
		}
		if want, err := marshalReflect(&r); err != nil || !bytes.Equal(b, want) {
			t.Fatalf("re-encoding differs from encoding/json's:\n got %s\nwant %s (%v)", b, want, err)
		}
		var again Record
		if err := json.Unmarshal(b, &again); err != nil {
			t.Fatalf("decoding our own output %s: %v", b, err)
		}
		b2, err := json.Marshal(&again)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, b2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", b, b2)
		}
	})
}
