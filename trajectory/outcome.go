package trajectory

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The outcomes a run can be marked with.
const (
	OutcomeAccepted = "accepted"
	OutcomeRejected = "rejected"
)

// MaxTaskClassLen bounds a task class: it names a kind of task, not the
// task, and every distinct class is a row of every cost report.
const MaxTaskClassLen = 64

// ErrInvalidOutcome is a malformed outcome or task class.
var ErrInvalidOutcome = errors.New("trajectory: invalid outcome")

// ParseOutcome reads an outcome as an agent's harness sends it in a header:
// "accepted" or "rejected", any case, surrounding spaces ignored.
func ParseOutcome(s string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case OutcomeAccepted:
		return OutcomeAccepted, nil
	case OutcomeRejected:
		return OutcomeRejected, nil
	}
	return "", fmt.Errorf("%w: outcome must be %q or %q", ErrInvalidOutcome, OutcomeAccepted, OutcomeRejected)
}

// ParseTaskClass checks a task class: 1 to MaxTaskClassLen characters of
// A-Z a-z 0-9 . _ : / -, surrounding spaces ignored. The class becomes a
// row label in reports, a CSV cell and SVG text, so it is kept to a token
// that needs no quoting anywhere.
func ParseTaskClass(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > MaxTaskClassLen {
		return "", fmt.Errorf("%w: task class must be 1-%d characters", ErrInvalidOutcome, MaxTaskClassLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '/' || c == '-') {
			return "", fmt.Errorf("%w: task class may hold only A-Z a-z 0-9 . _ : / -", ErrInvalidOutcome)
		}
	}
	return s, nil
}

// Mark is a judgement of a run: its outcome, its task class, or both ("" leaves that
// field as it is).
type Mark struct {
	Outcome   string `json:"outcome,omitempty"`
	TaskClass string `json:"task_class,omitempty"`
}

// Empty reports whether m changes nothing.
func (m Mark) Empty() bool { return m.Outcome == "" && m.TaskClass == "" }

// outcomeEvent is the Data of an outcome event.
type outcomeEvent struct {
	By     string `json:"by"`
	Source string `json:"source"` // "admin" or "header"
	From   Mark   `json:"from"`
	To     Mark   `json:"to"`
}

// ApplyMark sets what m names on r and returns the outcome event that
// records it, by whom and from which source ("admin", "header"). A mark
// that changes nothing writes no event. A finished run may be marked: its
// outcome is often known only after it ended.
func (r *Record) ApplyMark(m Mark, by, source string, now time.Time) []Event {
	from := Mark{Outcome: r.Outcome, TaskClass: r.TaskClass}
	if m.Outcome != "" {
		r.Outcome = m.Outcome
	}
	if m.TaskClass != "" {
		r.TaskClass = m.TaskClass
	}
	to := Mark{Outcome: r.Outcome, TaskClass: r.TaskClass}
	if to == from {
		return nil
	}
	r.UpdatedAt = now
	data, _ := json.Marshal(outcomeEvent{By: by, Source: source, From: from, To: to}) // plain strings: cannot fail
	return []Event{{At: now, Trajectory: r.ID, Type: EventOutcome, Data: data}}
}
