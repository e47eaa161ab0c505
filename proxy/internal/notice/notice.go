package notice

import (
	"fmt"
	"strings"
	"time"

	"gatekeeper/meter"
	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

// Remaining says what is left of one dimension of a level's budget, the
// calls in flight counted.
func Remaining(l meter.Level, d meter.Dimension) string {
	l.Used = l.Used.Add(l.Reserved)
	switch d {
	case meter.Turns:
		return fmt.Sprintf("%d model calls", max(l.Budget.Turns-l.Used.Turns, 0))
	case meter.Tokens:
		return fmt.Sprintf("about %d tokens", max(l.Budget.Tokens-l.Used.Tokens, 0))
	case meter.WallClock:
		return fmt.Sprintf("about %s", max(time.Duration(l.Budget.WallClockS)*time.Second-l.Used.WallClock, 0).Round(time.Second))
	case meter.Dollars:
		return fmt.Sprintf("about $%.2f", max(l.Budget.Dollars-meter.ToDollars(l.Used.Micros), 0))
	}
	return ""
}

// Left is what is left of the budget d binds on, among ls; "" when no
// level of ls is d's binding one.
func Left(ls []meter.Level, d meter.Decision) string {
	var left string
	for _, l := range ls {
		if l.ID == d.BindingID {
			left = Remaining(l, d.Binding)
		}
	}
	return left
}

// Budget is the budget notice appended to a steered or restricted
// request: which ceiling presses (d, read from ls) and what is left of
// it. readOnly names the tools that remain in the restrict stage.
func Budget(d meter.Decision, ls []meter.Level, readOnly []string) string {
	left := Left(ls, d)
	var b strings.Builder
	fmt.Fprintf(&b, "[gatekeeper budget notice] This run has used %.0f%% of its %s budget", d.Rho*100, d.Binding)
	if left != "" {
		fmt.Fprintf(&b, "; %s remain", left)
	}
	b.WriteString(".")
	if d.Stage == meter.Restrict {
		b.WriteString(" Only read-only tools remain available")
		if len(readOnly) > 0 {
			b.WriteString(" (" + strings.Join(readOnly, ", ") + ")")
		}
		b.WriteString(". Give your final answer now.")
	} else {
		b.WriteString(" Plan to finish the task within what remains.")
	}
	return b.String()
}

// Loop names what repeats and asks the model to change its approach or
// finish; in the restrict step it also says only read-only tools remain.
func Loop(w *trajectory.Watch, readOnly []string) string {
	var b strings.Builder
	b.WriteString("[gatekeeper loop notice] ")
	if s := w.Signal; s != nil {
		switch s.Kind {
		case trajectory.SignalRepeatedCall:
			fmt.Fprintf(&b, "You have made the same call to %s, with the same input, %d times in your last %d tool calls. ", s.Tool, s.Count, s.Window)
		case trajectory.SignalRepeatedResult:
			fmt.Fprintf(&b, "Your last %d tool results were identical. ", s.Count)
		case trajectory.SignalErrorResults:
			fmt.Fprintf(&b, "Your last %d tool results were errors. ", s.Count)
		case trajectory.SignalNoProgress:
			fmt.Fprintf(&b, "Your last %d replies made no new tool call and gave no answer. ", s.Count)
		}
	}
	b.WriteString("Repeating it will not change the outcome. ")
	if w.Restricts() {
		b.WriteString("Only read-only tools remain available")
		if len(readOnly) > 0 {
			b.WriteString(" (" + strings.Join(readOnly, ", ") + ")")
		}
		b.WriteString(". Use them to check your assumptions, or give your final answer now and say what blocks you.")
	} else {
		b.WriteString("Change your approach, or finish the task and say what blocks you.")
	}
	return b.String()
}

// LoopRefusal replaces a call withheld in the watchdog's restrict step.
func LoopRefusal(call streaming.ToolCall) string {
	return fmt.Sprintf("[gatekeeper] The call to %s was withheld: this run keeps repeating itself, so only read-only tools may run. Change your approach or give your final answer.", call.Name)
}

// Truncation is the text the next request of a thread whose last reply
// was cut at its output limit carries, so that the model knows why it
// has no result for a call it was writing.
func Truncation(inRow int64) string {
	return fmt.Sprintf("[gatekeeper] Your previous reply was cut at its output limit (%d in a row). A tool call you were writing in it was not delivered and did not run; do not wait for its result. Keep replies and tool inputs shorter, or split the work into smaller steps.", inRow)
}

// Cut replaces, in a streamed reply, a tool call the reply was still
// writing when it reached its output limit: the agent learns that the
// call was asked for and did not run.
func Cut(call streaming.ToolCall) string {
	return fmt.Sprintf("[gatekeeper] This reply reached its output limit while writing a call to %s; the call was cut short, so it was not delivered and did not run. Retry it with shorter input, or split the work into smaller steps.", call.Name)
}
