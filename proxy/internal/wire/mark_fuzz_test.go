package wire

import (
	"errors"
	"net/http"
	"testing"

	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/trajectory"
)

// FuzzReadMark: any pair of header values gives a mark of valid values or
// a 400, never a panic.
func FuzzReadMark(f *testing.F) {
	for _, s := range [][2]string{{"accepted", "bugfix"}, {"Rejected ", ""}, {"", " a/b:c-d.e_f "}, {"yes", "x"}, {"accepted", "a b"}, {"\x00", "<svg>"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, outcome, class string) {
		h := http.Header{}
		if outcome != "" {
			h.Set(headerOutcome, outcome)
		}
		if class != "" {
			h.Set(headerTaskClass, class)
		}
		m, err := ReadMark(h)
		if err != nil {
			var he *apierr.Error
			if !errors.As(err, &he) || he.Code != http.StatusBadRequest {
				t.Fatalf("error %v is not a 400", err)
			}
			return
		}
		if m.Outcome != "" && m.Outcome != trajectory.OutcomeAccepted && m.Outcome != trajectory.OutcomeRejected {
			t.Fatalf("outcome %q", m.Outcome)
		}
		if m.TaskClass != "" {
			if c, err := trajectory.ParseTaskClass(m.TaskClass); err != nil || c != m.TaskClass {
				t.Fatalf("class %q", m.TaskClass)
			}
		}
	})
}
