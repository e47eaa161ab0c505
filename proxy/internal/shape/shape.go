package shape

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/tidwall/sjson"

	"gatekeeper/meter"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/notice"
	"gatekeeper/proxy/internal/wire"
	"gatekeeper/streaming"
)

// Request is what shaping a request reads besides its body.
type Request struct {
	Dialect streaming.Dialect
	// OutputField is where the request takes its output limit: the member
	// the agent set, else the dialect's.
	OutputField string
	// Thinking: the request may carry a thinking budget that must stay
	// below its output limit.
	Thinking bool
	// AskUsage: the request streams in a dialect that reports usage only
	// when asked.
	AskUsage bool
	// MaxOut is the call's output limit after the tenant's and the
	// budget's clamps, Asked the agent's own; 0 when none.
	MaxOut, Asked int64
	// Truncated is how many of the thread's last replies were cut at
	// their output limit, in a row.
	Truncated int64
	// Interrupt is an operator's message for this request.
	Interrupt string
	// Decision and Levels are the budget's admission of the call.
	Decision meter.Decision
	Levels   []meter.Level
	// LoopNotice is the loop watchdog's notice, LoopRestrict its restrict
	// step.
	LoopNotice   string
	LoopRestrict bool
	// ReadOnly is the tenant's read_only_tools.
	ReadOnly []string
}

// Shaped is a request as Shape rewrote it.
type Shaped struct {
	Body []byte
	// Restricted: only read-only tools may be called; Removed are the
	// tools taken out of the request.
	Restricted bool
	Removed    []string
	// StripUsage: usage was asked for on the agent's behalf, and is taken
	// out of what the agent receives.
	StripUsage bool
}

// Restricts reports whether the call runs restricted to read-only tools:
// the budget's restrict stage, or the loop watchdog's.
func (r *Request) Restricts() bool {
	return r.Decision.Stage == meter.Restrict || r.LoopRestrict
}

// LimitOutput sets body's output limit (field) to maxOut when a clamp
// made it differ from asked, what the request asked (0: nothing), and,
// for an API with a thinking budget (thinking), keeps that budget under
// it.
func LimitOutput(body []byte, field string, thinking bool, maxOut, asked int64) ([]byte, error) {
	if maxOut <= 0 || maxOut == asked {
		return body, nil
	}
	out, err := sjson.SetBytes(body, field, maxOut)
	if err != nil {
		return nil, apierr.BadRequest("could not set the output limit: " + err.Error())
	}
	if thinking {
		if out, _, err = wire.ThinkingBelow(out, maxOut); err != nil {
			return nil, apierr.BadRequest("could not fit the thinking budget under the output limit: " + err.Error())
		}
	}
	return out, nil
}

// Shape rewrites an admitted request for its budget stage, the loop
// watchdog's step and metering, minimally and at the end:
//   - steer: a budget notice is appended as the last content;
//   - restrict: tools outside the tenant's read_only_tools are removed
//     (with a tool_choice naming one), the notice asks for a final answer,
//     and calls to removed tools in the reply are withheld;
//   - the loop watchdog's notice, when its step has one, is appended after
//     it, and its restrict step narrows the tools as the budget's does;
//   - a streamed Chat request is asked to report usage, and the extra
//     usage is taken out of what the agent receives.
//
// A notice that cannot be appended (no conversation to append to) is
// logged, and the request forwarded without it.
func Shape(ctx context.Context, log *slog.Logger, body []byte, r Request) (Shaped, error) {
	d := r.Dialect
	body, err := LimitOutput(body, r.OutputField, r.Thinking, r.MaxOut, r.Asked)
	if err != nil {
		return Shaped{}, err
	}
	if r.Truncated > 0 {
		if out, err := d.AppendNotice(body, notice.Truncation(r.Truncated)); err == nil {
			body = out
		}
	}
	if r.Interrupt != "" {
		out, err := d.AppendNotice(body, "[message from the operator] "+r.Interrupt)
		if err != nil {
			log.LogAttrs(ctx, slog.LevelWarn, "operator message not appended", slog.String("error", err.Error()))
		} else {
			body = out
		}
	}
	var s Shaped
	stage := r.Decision.Stage
	if r.Restricts() {
		out, removed, err := d.RestrictTools(body, Grant(r.ReadOnly))
		if err != nil {
			return Shaped{}, apierr.BadRequest("could not narrow the request's tools: " + err.Error())
		}
		body, s.Removed, s.Restricted = out, removed, true
	}
	var notices []string
	if stage == meter.Restrict || stage == meter.Steer {
		notices = append(notices, notice.Budget(r.Decision, r.Levels, r.ReadOnly))
	}
	if r.LoopNotice != "" {
		notices = append(notices, r.LoopNotice)
	}
	for _, n := range notices {
		out, err := d.AppendNotice(body, n)
		if err != nil {
			// A request without a conversation to append to is forwarded
			// as it is; the provider will judge it.
			log.LogAttrs(ctx, slog.LevelWarn, "notice not appended", slog.String("error", err.Error()))
			break
		}
		body = out
	}
	if r.AskUsage {
		out, added, err := streaming.EnsureIncludeUsage(body)
		if err == nil {
			body, s.StripUsage = out, added
		}
	}
	s.Body = body
	return s, nil
}

// ClampOutput is a call's output limit under the tenant's ceiling: the
// lower of the two, the ceiling when the agent set none; 0 when neither.
func ClampOutput(asked int64, ceiling int) int64 {
	c := int64(ceiling)
	switch {
	case c <= 0:
		return asked
	case asked <= 0 || asked > c:
		return c
	}
	return asked
}

// Grant is the allow function of a tenant's read-only grant: whether a
// tool is one of tools.
func Grant(tools []string) func(name string) bool {
	return func(name string) bool { return slices.Contains(tools, name) }
}

// Refusal is the text that replaces a call withheld under decision: in
// the budget's restrict stage, or else in the loop watchdog's.
func Refusal(decision meter.Decision) func(call streaming.ToolCall) string {
	return func(call streaming.ToolCall) string {
		if decision.Stage != meter.Restrict {
			return notice.LoopRefusal(call)
		}
		if call.Ambiguous {
			return fmt.Sprintf("[gatekeeper] The call to %s was withheld: the reply that carried it names a member twice, so it reads two ways, and this run's budget is nearly spent (%.0f%% of its %s budget), so only calls gatekeeper can read one way may run. Give your final answer.",
				call.Name, decision.Rho*100, decision.Binding)
		}
		return fmt.Sprintf("[gatekeeper] The call to %s was withheld: this run's budget is nearly spent (%.0f%% of its %s budget), so only read-only tools may run. Give your final answer.",
			call.Name, decision.Rho*100, decision.Binding)
	}
}
