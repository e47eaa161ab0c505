package trajectory

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestParseOutcome(t *testing.T) {
	tests := []struct {
		name, in, want string
		ok             bool
	}{
		{"accepted", "accepted", OutcomeAccepted, true},
		{"rejected any case and spaces", "  Rejected ", OutcomeRejected, true},
		{"empty", "", "", false},
		{"other word", "done", "", false},
		{"boolean", "true", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseOutcome(tc.in)
			if tc.ok != (err == nil) || got != tc.want {
				t.Fatalf("ParseOutcome(%q) = %q, %v; want %q, ok %v", tc.in, got, err, tc.want, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidOutcome) {
				t.Errorf("error %v is not ErrInvalidOutcome", err)
			}
		})
	}
}

func TestParseTaskClass(t *testing.T) {
	tests := []struct {
		name, in, want string
		ok             bool
	}{
		{"token", "bugfix", "bugfix", true},
		{"punctuation allowed", " repo/refactor:large-v2.1_x ", "repo/refactor:large-v2.1_x", true},
		{"longest", strings.Repeat("a", MaxTaskClassLen), strings.Repeat("a", MaxTaskClassLen), true},
		{"too long", strings.Repeat("a", MaxTaskClassLen+1), "", false},
		{"empty", "  ", "", false},
		{"inner space", "bug fix", "", false},
		{"quote", `a"b`, "", false},
		{"comma breaks CSV", "a,b", "", false},
		{"angle bracket breaks SVG", "<b>", "", false},
		{"control byte", "a\x00b", "", false},
		{"non-ASCII", "café", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTaskClass(tc.in)
			if tc.ok != (err == nil) || got != tc.want {
				t.Fatalf("ParseTaskClass(%q) = %q, %v; want %q, ok %v", tc.in, got, err, tc.want, tc.ok)
			}
		})
	}
}

func TestApplyMark(t *testing.T) {
	r := New("run-1", "team-a", t0)
	later := t0.Add(1e9)
	evs := r.ApplyMark(Mark{TaskClass: "bugfix"}, "harness", "header", later)
	if r.TaskClass != "bugfix" || r.Outcome != "" || len(evs) != 1 || !r.UpdatedAt.Equal(later) {
		t.Fatalf("class only: record %q/%q, events %v", r.Outcome, r.TaskClass, evs)
	}
	evs = r.ApplyMark(Mark{Outcome: OutcomeAccepted}, "alice", "admin", later)
	if r.TaskClass != "bugfix" || r.Outcome != OutcomeAccepted || len(evs) != 1 {
		t.Fatalf("outcome only: record %q/%q, events %v", r.Outcome, r.TaskClass, evs)
	}
	if evs[0].Type != EventOutcome || evs[0].Trajectory != "run-1" {
		t.Errorf("event %+v", evs[0])
	}
	want := `{"by":"alice","source":"admin","from":{"task_class":"bugfix"},"to":{"outcome":"accepted","task_class":"bugfix"}}`
	if string(evs[0].Data) != want {
		t.Errorf("event data %s, want %s", evs[0].Data, want)
	}
	if evs := r.ApplyMark(Mark{Outcome: OutcomeAccepted, TaskClass: "bugfix"}, "alice", "admin", later); evs != nil {
		t.Errorf("a mark that changes nothing wrote %v", evs)
	}
}

func TestRecordJSONOutcome(t *testing.T) {
	r := contractRecord()
	r.Outcome, r.TaskClass = OutcomeRejected, "bugfix"
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"outcome":"rejected","task_class":"bugfix"`) {
		t.Errorf("outcome fields missing from %s", b)
	}
	var got Record
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Outcome != r.Outcome || got.TaskClass != r.TaskClass {
		t.Errorf("round trip gave %q/%q", got.Outcome, got.TaskClass)
	}
	b, _ = json.Marshal(New("run-2", "team-a", t0))
	if strings.Contains(string(b), "outcome") || strings.Contains(string(b), "task_class") {
		t.Errorf("an unjudged record shows outcome fields: %s", b)
	}
}

// FuzzParseMark feeds header values to the two parsers: whatever they
// accept must be a value the record, reports, CSV and SVG can hold as is.
func FuzzParseMark(f *testing.F) {
	for _, s := range []string{"accepted", "REJECTED", " bugfix ", "a,b", "<svg>", "\x00", strings.Repeat("x", 70), "café"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if o, err := ParseOutcome(s); err == nil && o != OutcomeAccepted && o != OutcomeRejected {
			t.Fatalf("ParseOutcome(%q) = %q", s, o)
		}
		c, err := ParseTaskClass(s)
		if err != nil {
			return
		}
		if c == "" || len(c) > MaxTaskClassLen || strings.ContainsAny(c, " ,\"'<>&\\\n\r\t") {
			t.Fatalf("ParseTaskClass(%q) accepted %q", s, c)
		}
		if again, err := ParseTaskClass(c); err != nil || again != c {
			t.Fatalf("ParseTaskClass not idempotent on %q: %q, %v", c, again, err)
		}
	})
}
