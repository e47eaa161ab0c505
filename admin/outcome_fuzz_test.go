package admin

import (
	"errors"
	"testing"

	"gatekeeper/trajectory"
)

// FuzzParseOutcome: any body gets a mark or an API error, never a panic,
// and a mark holds only values the record and the reports accept.
func FuzzParseOutcome(f *testing.F) {
	for _, s := range []string{`{"accepted": true}`, `{"accepted": false, "task_class": "bugfix"}`, `{"accepted": "yes"}`,
		`{"accepted": true} {}`, `{}`, ``, `[]`, `{"accepted": true, "task_class": "<x>"}`, `{"accepted":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseOutcome(b)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Code != 400 {
				t.Fatalf("error %v is not a 400 of the admin API", err)
			}
			return
		}
		if m.Outcome != trajectory.OutcomeAccepted && m.Outcome != trajectory.OutcomeRejected {
			t.Fatalf("outcome %q", m.Outcome)
		}
		if m.TaskClass != "" {
			if c, err := trajectory.ParseTaskClass(m.TaskClass); err != nil || c != m.TaskClass {
				t.Fatalf("class %q passed the body parser but not the class parser", m.TaskClass)
			}
		}
	})
}
