package proxy

import (
	"net/http"
	"slices"

	"gatekeeper/proxy/internal/replybody"
	"gatekeeper/proxy/internal/shape"
	"gatekeeper/proxy/internal/watchdog"
	"gatekeeper/streaming"
)

// shape rewrites the admitted body for the turn's stage and the loop
// watchdog's step (shape.Shape); a restricted turn's reply goes through a
// call filter that withholds calls outside the tenant's read-only grant.
func (t *turn) shape(body []byte) ([]byte, error) {
	d, tn := t.req.dialect, t.req.tenant
	s, err := shape.Shape(t.ctx, t.log, body, shape.Request{Dialect: d.Stream, OutputField: t.outputField(), Thinking: d.Thinking,
		AskUsage: d.AskUsage && t.pr.Stream, MaxOut: t.maxOut, Asked: t.pr.MaxOutputTokens, Truncated: t.truncated,
		Interrupt: t.interrupt, Decision: t.adm.Decision, Levels: t.adm.Levels, LoopNotice: t.loop.Notice, LoopRestrict: t.loop.Restrict,
		ReadOnly: tn.ReadOnlyTools})
	if err != nil {
		return nil, err
	}
	t.removed, t.stripUsage = s.Removed, s.StripUsage
	if s.Restricted {
		if t.filter, err = d.Stream.NewCallFilter(shape.Grant(tn.ReadOnlyTools), shape.Refusal(t.adm.Decision)); err != nil {
			return nil, err
		}
		t.filter.Grant() // an unknown call type is no read-only tool
	}
	return s.Body, nil
}

// outputField is the field of the turn's body that holds its output
// limit: the one the agent used, or its API's.
func (t *turn) outputField() string {
	if t.pr.MaxOutputField != "" {
		return t.pr.MaxOutputField
	}
	return t.req.dialect.OutputField
}

// filterJSON applies the call filter to a whole non-streamed reply before
// any of it reaches the agent (replybody.Filter). A reply that cannot be
// checked is charged, undelivered.
func (t *turn) filterJSON(resp *http.Response, cutOnly bool) error {
	raw, err := replybody.Filter(resp, t.req.rules.cfg.Limits.MaxBodyBytes, t.filter.Body, cutOnly)
	if err != nil {
		// The provider produced the reply: it is charged, undelivered.
		res, _ := t.req.dialect.Stream.DecodeJSON(raw)
		t.chargeUndelivered(res, int64(len(raw)), err)
		return err
	}
	if len(t.filter.Withheld()) > 0 {
		// The decoder reads what the agent receives; the watchdog counts
		// what the model proposed.
		if res, err := t.req.dialect.Stream.DecodeJSON(raw); err == nil {
			t.proposed = watchdog.See(t.req.rules.cfg.WatchdogFor(t.req.tenant), res)
		}
	}
	return nil
}

// withheld reports whether the call filter withheld the call with id.
func (t *turn) withheld(id string) bool {
	return t.filter != nil && slices.ContainsFunc(t.filter.Withheld(), func(c streaming.ToolCall) bool { return c.ID == id })
}

func allowAll(string) bool { return true }
