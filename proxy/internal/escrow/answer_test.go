package escrow

import (
	"errors"
	"net/http"
	"testing"

	"gatekeeper/trajectory"
)

// TestAwaitedAnswer pins what the agent gets for every end of a wait on a
// held turn, in each form (docs/guide/approvals.md, "How a held call behaves"): the same
// error whatever the form, except that gatekeeper shutting down drops a
// stream (its agent retries elsewhere) and answers a JSON request 503.
func TestAwaitedAnswer(t *testing.T) {
	boom := errors.New("boom")
	rec := &trajectory.Record{ID: "run-1"}
	cases := []struct {
		name       string
		a          Awaited
		code       [2]int // FormJSON, FormStream; 0: dropped
		typ        string
		noRetry    bool
		retryAfter bool
	}{
		{"stopped", Awaited{End: Stopped, Rec: rec}, [2]int{403, 403}, "trajectory_canceled", true, false},
		{"elsewhere", Awaited{End: Elsewhere, Err: errDelivered}, [2]int{409, 409}, "invalid_request_error", true, false},
		{"store down", Awaited{End: StoreDown, Err: boom}, [2]int{503, 503}, "upstream_error", false, true},
		{"unrenderable", Awaited{End: Unrenderable, Err: boom}, [2]int{500, 500}, "upstream_error", true, false},
		{"closing", Awaited{End: Closing, Err: errServerClosing}, [2]int{503, 0}, "upstream_error", false, true},
		{"killed", Awaited{End: Killed, Err: boom}, [2]int{0, 0}, "", false, false},
		{"gone", Awaited{End: Gone, Err: boom}, [2]int{0, 0}, "", false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for i, form := range []Form{FormJSON, FormStream} {
				ans, drop := c.a.Answer(form)
				if want := c.code[i]; want == 0 {
					if !drop || ans != nil {
						t.Errorf("form %d: %+v, drop %v; want the connection dropped", form, ans, drop)
					}
					continue
				}
				if drop || ans == nil || ans.Status != c.code[i] || ans.Type != c.typ || ans.NoRetry != c.noRetry || (ans.RetryAfter > 0) != c.retryAfter || ans.Msg == "" {
					t.Errorf("form %d: %+v, drop %v; want %d %s", form, ans, drop, c.code[i], c.typ)
				}
			}
		})
	}
	if ans, drop := (Awaited{End: Decided, Body: []byte("{}")}).Answer(FormJSON); ans != nil || drop {
		t.Errorf("a decided wait has an error answer: %+v, %v", ans, drop)
	}
	if ans, _ := (Awaited{End: Elsewhere}).Answer(FormStream); ans.Status != http.StatusConflict || ans.Msg != Delivered().Msg {
		t.Errorf("delivered elsewhere: %+v", ans)
	}
	if ans := ApprovalsDown(errors.New("down")); !errors.Is(ans, ans.Err) || ans.Status != http.StatusServiceUnavailable {
		t.Errorf("approvals down: %+v", ans)
	}
}
