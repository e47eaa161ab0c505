package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"gatekeeper/trajectory"
)

// A settle that finds its call gone from the record (its data lost while
// the reply streamed) writes nothing: the log says so at ERROR, naming the
// trajectory, the call and the figures, and never says the turn was
// recorded.
func TestChargeOfAVanishedCallIsLoggedNotRecorded(t *testing.T) {
	logs := &lockedBuffer{}
	e := newEnv(t, envOpts{log: logs})
	req, err := http.NewRequestWithContext(ctxT(t), "POST", e.gk+"/t/vanish-1/anthropic/v1/messages", strings.NewReader(anthropicReq(true, "slow one")))
	if err != nil {
		t.Fatal(err)
	}
	h := hdr("X-Mock-Turn", `{"kind":"text","deltas":10,"event_delay":"30ms"}`)
	for i := 0; i+1 < len(h); i += 2 {
		req.Header.Set(h[i], h[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := readEvent(br); err != nil {
		t.Fatal(err)
	}
	call := e.record(t, "vanish-1").Call
	if call == "" {
		t.Fatal("no call in flight on the record")
	}
	// The record loses its call, as a store that lost its data would.
	if _, err := e.store.Update(context.Background(), "vanish-1", func(r *trajectory.Record) ([]trajectory.Event, error) {
		r.State, r.Call, r.CallReserved, r.Reserved = trajectory.Ready, "", trajectory.Reservation{}, trajectory.Reservation{}
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := readEvent(br); err != nil {
			break
		}
	}
	var lost map[string]any
	waitFor(t, "the dropped charge's log line", func() bool {
		for line := range strings.Lines(logs.String()) {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil && m["call"] == call {
				if m["msg"] == "turn" {
					t.Fatalf("a charge that was not written is logged as a turn: %s", line)
				}
				if m["msg"] == "charge not recorded" {
					lost = m
				}
			}
		}
		return lost != nil
	})
	if lost["level"] != "ERROR" || lost["trajectory"] != "vanish-1" || lost["output_tokens"] == nil || lost["dollars"] == nil {
		t.Errorf("the dropped charge's line lacks its level, trajectory or figures: %v", lost)
	}
	if rec := e.record(t, "vanish-1"); rec.Turns != 0 || rec.Spend.Dollars != 0 {
		t.Errorf("the record was charged after losing the call: %d turns, $%v", rec.Turns, rec.Spend.Dollars)
	}
}
