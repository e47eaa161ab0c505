package proxy

import (
	"errors"
	"net/http"
	"testing"

	"gatekeeper/trajectory"
)

// TestAwaitedAnswer pins what the agent gets for every end of a wait on a
// held turn, in each form (README, "How a held call behaves"): the same
// error whatever the form, except that gatekeeper shutting down drops a
// stream (its agent retries elsewhere) and answers a JSON request 503.
func TestAwaitedAnswer(t *testing.T) {
	boom := errors.New("boom")
	rec := &trajectory.Record{ID: "run-1"}
	cases := []struct {
		a          awaited
		code       [2]int // formJSON, formStream; 0: dropped
		typ        string
		noRetry    bool
		retryAfter bool
	}{
		{awaited{end: awaitStopped, rec: rec}, [2]int{403, 403}, errTrajectoryCanceled, true, false},
		{awaited{end: awaitElsewhere, err: errDelivered}, [2]int{409, 409}, errInvalidRequest, true, false},
		{awaited{end: awaitStoreDown, err: boom}, [2]int{503, 503}, errUpstream, false, true},
		{awaited{end: awaitUnrenderable, err: boom}, [2]int{500, 500}, errUpstream, true, false},
		{awaited{end: awaitClosing, err: errServerClosing}, [2]int{503, 0}, errUpstream, false, true},
		{awaited{end: awaitKilled, err: errKilled}, [2]int{0, 0}, "", false, false},
		{awaited{end: awaitGone, err: boom}, [2]int{0, 0}, "", false, false},
	}
	for _, c := range cases {
		for i, form := range []replyForm{formJSON, formStream} {
			he, drop := c.a.answer(form)
			if want := c.code[i]; want == 0 {
				if !drop || he != nil {
					t.Errorf("end %d, form %d: %+v, drop %v; want the connection dropped", c.a.end, form, he, drop)
				}
				continue
			}
			if drop || he == nil || he.Code != c.code[i] || he.Type != c.typ || he.NoRetry != c.noRetry || (he.RetryAfter > 0) != c.retryAfter || he.Msg == "" {
				t.Errorf("end %d, form %d: %+v, drop %v; want %d %s", c.a.end, form, he, drop, c.code[i], c.typ)
			}
		}
	}
	if he, drop := (awaited{end: awaitDecided, body: []byte("{}")}).answer(formJSON); he != nil || drop {
		t.Errorf("a decided wait has an error answer: %+v, %v", he, drop)
	}
	if he, _ := (awaited{end: awaitElsewhere}).answer(formStream); he.Code != http.StatusConflict || he.Msg != errHeldDelivered().Msg {
		t.Errorf("delivered elsewhere: %+v", he)
	}
}
