package trajectory

import (
	"fmt"
	"strconv"
)

// The loop watchdog's state of one thread. It lives on the thread's record
// and is changed in the same store update as the turn it reads, so every
// replica sees the same counters; it is small and bounded: at most
// MaxWatchWindow call digests and a few counters.

// Digest is a 64-bit digest of a tool call (its name and canonical input)
// or of a tool result's content. Its JSON form is 16 hex digits, which
// JavaScript reads without losing precision.
type Digest uint64

// String is the digest's 16 hex digits.
func (d Digest) String() string { return fmt.Sprintf("%016x", uint64(d)) }

// MarshalText writes the 16 hex digits.
func (d Digest) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads what MarshalText writes.
func (d *Digest) UnmarshalText(b []byte) error {
	v, err := strconv.ParseUint(string(b), 16, 64)
	if err != nil {
		return fmt.Errorf("%w: digest %q", ErrInvalidRecord, b)
	}
	*d = Digest(v)
	return nil
}

// MaxWatchWindow bounds the calls a thread's watch remembers, and so the
// watchdog's call_window.
const MaxWatchWindow = 32

// LoopStep is how far the watchdog has escalated on a thread.
type LoopStep string

// The steps, in escalating order; the last is LoopPause or LoopFail, as
// configured.
const (
	// LoopSteer: a notice naming what repeats goes into the next request.
	LoopSteer LoopStep = "steer"
	// LoopRestrict: only read-only tools remain, as in the budget's
	// restrict stage.
	LoopRestrict LoopStep = "restrict"
	// LoopPause: the thread is paused (pause_reason LOOP) for an operator.
	LoopPause LoopStep = "pause"
	// LoopFail: the run ends FAILED with exit reason LOOP.
	LoopFail LoopStep = "fail"
)

// PauseLoop is the PauseReason of a thread the loop watchdog paused.
const PauseLoop = "LOOP"

// The signals the watchdog reads.
const (
	// SignalRepeatedCall: the same call (name and input) proposed
	// RepeatedCalls times within the last CallWindow calls.
	SignalRepeatedCall = "repeated_call"
	// SignalRepeatedResult: the same non-empty result content returned
	// RepeatedResults times in a row.
	SignalRepeatedResult = "repeated_result"
	// SignalErrorResults: ErrorResults error results in a row.
	SignalErrorResults = "error_results"
	// SignalNoProgress: IdleTurns replies in a row with no new call and
	// no text.
	SignalNoProgress = "no_progress"
)

// LoopSignal is the evidence of one signal: what repeats and how often.
type LoopSignal struct {
	Kind      string `json:"kind"`
	Tool      string `json:"tool,omitempty"` // repeated_call: the tool's name
	Digest    Digest `json:"digest,omitzero"`
	Count     int64  `json:"count"`
	Threshold int64  `json:"threshold"`
	Window    int64  `json:"window,omitempty"` // repeated_call: the calls looked at
}

// WatchLimits are a thread's thresholds. A threshold of zero or less turns
// its signal off.
type WatchLimits struct {
	RepeatedCalls   int64
	CallWindow      int64
	RepeatedResults int64
	ErrorResults    int64
	IdleTurns       int64
	// Last is the step after restrict: LoopPause or LoopFail.
	Last LoopStep
}

// SeenCall is one tool call of a reply, as the watchdog reads it.
type SeenCall struct {
	Name   string
	Digest Digest
}

// SeenResult is one tool result of a request. Digest 0 means the result
// had no content, which says nothing about a loop.
type SeenResult struct {
	Digest Digest
	Error  bool
}

// maxToolName bounds the tool name kept as evidence.
const maxToolName = 128

// Watch is the watchdog's state of a thread.
type Watch struct {
	// Calls are the digests of the thread's latest calls, oldest first, at
	// most CallWindow (≤ MaxWatchWindow) of them.
	Calls []Digest `json:"calls,omitempty"`
	// Result is the latest non-empty result's digest, ResultsInRow how
	// many results in a row had it.
	Result       Digest `json:"result,omitzero"`
	ResultsInRow int64  `json:"results_in_row,omitzero"`
	ErrorsInRow  int64  `json:"errors_in_row,omitzero"`
	IdleTurns    int64  `json:"idle_turns,omitzero"`
	// Step is the escalation reached, "" before any; Signal the evidence
	// of the latest step, and StepTurn the record's Turns when it was
	// taken: one step per turn at most, so that the model sees each
	// notice before the next step.
	Step     LoopStep    `json:"step,omitempty"`
	Signal   *LoopSignal `json:"signal,omitempty"`
	StepTurn int64       `json:"step_turn,omitzero"`
	// Notice is set while the latest step's notice waits for the
	// thread's next request.
	Notice bool `json:"notice,omitempty"`
}

// IsZero reports whether w holds nothing.
func (w *Watch) IsZero() bool {
	return len(w.Calls) == 0 && w.Result == 0 && w.ResultsInRow == 0 && w.ErrorsInRow == 0 &&
		w.IdleTurns == 0 && w.Step == "" && w.Signal == nil && w.StepTurn == 0 && !w.Notice
}

// Reset clears counters and step: an operator's resume gives the thread a
// fresh start.
func (w *Watch) Reset() { *w = Watch{} }

func (w *Watch) clone() Watch {
	c := *w
	c.Calls = append([]Digest(nil), w.Calls...)
	if w.Signal != nil {
		s := *w.Signal
		c.Signal = &s
	}
	return c
}

// ObserveReply reads a finished reply's tool calls (every call the model
// proposed, withheld ones included) and whether it gave any text. It
// returns the strongest signal that reached its threshold, or nil.
func (w *Watch) ObserveReply(l WatchLimits, calls []SeenCall, text bool) *LoopSignal {
	window := min(max(l.CallWindow, 1), MaxWatchWindow)
	var sig *LoopSignal
	fresh := false
	for _, c := range calls {
		seen := int64(0)
		for _, d := range w.Calls {
			if d == c.Digest {
				seen++
			}
		}
		fresh = fresh || seen == 0
		w.Calls = append(w.Calls, c.Digest)
		if over := int64(len(w.Calls)) - window; over > 0 {
			w.Calls = append(w.Calls[:0], w.Calls[over:]...)
		}
		n := int64(0)
		for _, d := range w.Calls {
			if d == c.Digest {
				n++
			}
		}
		if l.RepeatedCalls > 0 && n >= l.RepeatedCalls && (sig == nil || n > sig.Count) {
			sig = &LoopSignal{Kind: SignalRepeatedCall, Tool: clip(c.Name, maxToolName), Digest: c.Digest,
				Count: n, Threshold: l.RepeatedCalls, Window: window}
		}
	}
	if text || fresh {
		w.IdleTurns = 0
	} else {
		w.IdleTurns++
	}
	if sig == nil && l.IdleTurns > 0 && w.IdleTurns >= l.IdleTurns {
		sig = &LoopSignal{Kind: SignalNoProgress, Count: w.IdleTurns, Threshold: l.IdleTurns}
	}
	return sig
}

// ObserveResults reads the tool results a request carried, in order, for
// calls the thread was waiting on. It returns the strongest signal that
// reached its threshold, or nil.
func (w *Watch) ObserveResults(l WatchLimits, results []SeenResult) *LoopSignal {
	var sig *LoopSignal
	var lastErr Digest
	for _, r := range results {
		if r.Error {
			w.ErrorsInRow++
			lastErr = r.Digest
		} else {
			w.ErrorsInRow = 0
		}
		switch {
		case r.Digest == 0:
			// An empty result (a command with no output) is too common in
			// healthy work to count; it neither adds to nor breaks a row.
		case r.Digest == w.Result:
			w.ResultsInRow++
		default:
			w.Result, w.ResultsInRow = r.Digest, 1
		}
		if l.RepeatedResults > 0 && r.Digest != 0 && w.ResultsInRow >= l.RepeatedResults {
			sig = &LoopSignal{Kind: SignalRepeatedResult, Digest: w.Result, Count: w.ResultsInRow, Threshold: l.RepeatedResults}
		}
	}
	if sig == nil && l.ErrorResults > 0 && w.ErrorsInRow >= l.ErrorResults {
		// The evidence names the latest error's content.
		sig = &LoopSignal{Kind: SignalErrorResults, Digest: lastErr, Count: w.ErrorsInRow, Threshold: l.ErrorResults}
	}
	return sig
}

// Escalate takes the step after the current one for sig, on a record that
// has made turns model calls: steer, restrict, then l.Last. It takes at most
// one step per turn and none past pause or fail; it returns the step
// taken, or "" when none was.
func (w *Watch) Escalate(l WatchLimits, sig *LoopSignal, turns int64) LoopStep {
	if sig == nil || w.Step != "" && w.StepTurn == turns {
		return ""
	}
	var next LoopStep
	switch w.Step {
	case "":
		next = LoopSteer
	case LoopSteer:
		next = LoopRestrict
	case LoopRestrict:
		next = l.Last
		if next != LoopFail {
			next = LoopPause
		}
	default:
		return ""
	}
	s := *sig
	w.Step, w.Signal, w.StepTurn = next, &s, turns
	w.Notice = next == LoopSteer || next == LoopRestrict
	return next
}

// Restricts reports whether the thread may only use read-only tools.
func (w *Watch) Restricts() bool { return w.Step == LoopRestrict || w.Step == LoopPause }

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
