package escrow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"gatekeeper/approvals"
	"gatekeeper/config"
	"gatekeeper/streaming"
)

// Whole replies: a non-streamed turn's reply, and a continuation's, are
// read whole and judged before any of them reaches the agent. The turn
// itself (its gate input, the recording and charging of its turn, its
// model call) is the caller's, through Opener and Call.

// ErrTooLarge: a whole reply grew past what may be read of it.
var ErrTooLarge = errors.New("proxy: reply too large to hold for approval")

// ReadWhole reads a whole reply from body, at most limit bytes; past them
// it returns ErrTooLarge with what it read.
func ReadWhole(body io.Reader, limit int64) ([]byte, error) {
	raw, err := io.ReadAll(io.LimitReader(body, limit+1))
	if err == nil && int64(len(raw)) > limit {
		err = ErrTooLarge
	}
	return raw, err
}

// Opener is the turn's side of a whole reply the escrow may hold: the
// reply's gated calls, and the hold's opening, which records the turn as
// held (and, when the hold cannot be opened, accounts for what the
// provider produced).
type Opener interface {
	Gated(res *streaming.Result) []Gated
	Open(ctx context.Context, res *streaming.Result, rep Reply, gated []Gated) (*approvals.Hold, error)
}

// Call is the model call that continues a held turn, admitted on the
// hold's record like a turn: its send on a key with capacity, and the
// recording of its turn.
type Call interface {
	Opener
	// Send sends the call; its reply is read whole.
	Send(ctx context.Context) (*http.Response, error)
	// Failed ends the call with no reply to charge.
	Failed(err error)
	// Settle records the call's turn: its decoded reply res with the
	// reply's status; or, res nil, the provider's refusal (status, and
	// the error body).
	Settle(res *streaming.Result, status int, body []byte)
}

// HoldJSON decides a non-streamed reply raw, of API c.API, before any of
// it reaches client c. A reply with a gated call is held (the agent's
// request simply waits) and replaced by the decided reply: held is true,
// and the turn was recorded when its hold opened. Any other reply goes
// out as it came, and one too large to hold with its gated calls refused:
// held is false. An error is the *Answer the agent gets, or the wait's.
func (e *Keeper) HoldJSON(ctx context.Context, o Opener, c *Client, raw []byte) (out []byte, held bool, err error) {
	d := e.dialect(c.API)
	rep := Reply{Form: FormJSON, Body: raw}
	res, err := rep.Decode(d)
	if err != nil {
		return raw, false, nil
	}
	gated := o.Gated(res)
	if len(gated) == 0 {
		return raw, false, nil
	}
	if int64(len(raw)) > e.maxHeld {
		// Too large to hold: the gated calls end the turn, refused.
		out, err := Render(d, tooLarge(rep, gated), c)
		return out, false, err
	}
	h, err := o.Open(context.WithoutCancel(ctx), res, rep, gated)
	if err != nil {
		return nil, false, ApprovalsDown(err)
	}
	out, err = e.AwaitJSON(ctx, &Wait{Hold: h, Client: c})
	return out, true, err
}

// tooLarge is the decision on a reply too large to hold: every gated
// call refused, with a text saying why.
func tooLarge(rep Reply, gated []Gated) *Decision {
	dr := &Decision{Reply: rep, Texts: map[string]string{}}
	for _, g := range gated {
		dr.Refuse = append(dr.Refuse, g.Call.ID)
		dr.Texts[g.Call.ID] = "[gatekeeper] The call to " + g.Call.Name + " needs approval and the reply was too large to hold for it (approvals.max_held_bytes); the call was not delivered."
	}
	return dr
}

// Continue makes call, the continuation of a held turn of API api, and
// returns its reply in form; or, when the reply makes a gated call of its
// own, the hold opened for it (the next hold of the same turn). The reply
// is read whole, bounded by approvals.max_held_bytes; what becomes of the
// call's turn follows from it (Call).
func (e *Keeper) Continue(ctx context.Context, call Call, api streaming.API, form Form) ([]byte, *approvals.Hold, error) {
	raw, status, err := e.send(ctx, call)
	if err != nil {
		call.Failed(err)
		return nil, nil, err
	}
	if status < 200 || status > 299 {
		call.Settle(nil, status, raw)
		return nil, nil, fmt.Errorf("provider answered the continuation with status %d", status)
	}
	cont := Reply{Form: form, Body: raw}
	res, err := cont.Decode(e.dialect(api))
	if err != nil {
		call.Failed(err)
		return nil, nil, err
	}
	if res.Truncated || len(res.Errors) > 0 {
		call.Settle(res, status, raw)
		return nil, nil, errors.New("the continuation did not end cleanly")
	}
	if gated := call.Gated(res); len(gated) > 0 {
		next, err := call.Open(ctx, res, cont, gated)
		if err != nil {
			return nil, nil, fmt.Errorf("holding the continuation's gated call: %w", err)
		}
		return nil, next, nil
	}
	call.Settle(res, status, raw)
	return raw, nil, nil
}

// send sends call and reads its whole reply, bounded by
// approvals.max_held_bytes.
func (e *Keeper) send(ctx context.Context, call Call) ([]byte, int, error) {
	resp, err := call.Send(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	raw, err := ReadWhole(resp.Body, e.maxHeld)
	if err != nil {
		return nil, resp.StatusCode, err
	}
	return raw, resp.StatusCode, nil
}

// ReadOnly is the read-only grant of each of tenants, by name.
func ReadOnly(tenants []config.Tenant) func(tenant string) []string {
	return func(name string) []string {
		for i := range tenants {
			if tenants[i].Name == name {
				return tenants[i].ReadOnlyTools
			}
		}
		return nil
	}
}
