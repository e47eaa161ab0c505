package watchdog

import (
	"fmt"
	"testing"
	"time"

	"gatekeeper/config"
	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

var now = time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)

func on() config.Watchdog {
	w := config.DefaultWatchdog()
	w.RepeatedResults, w.ErrorResults = 2, 2
	w.RepeatedCalls, w.CallWindow = 2, 4
	yes := true
	w.Enabled = &yes
	return w
}

func thread() *trajectory.Record {
	return &trajectory.Record{ID: "run", Tenant: "team-a", State: trajectory.Ready}
}

// request brings n results to rec, each the same failing result.
func request(t *testing.T, w config.Watchdog, rec *trajectory.Record, n int) (Step, []trajectory.Event) {
	t.Helper()
	results := []streaming.ToolResult{{ID: fmt.Sprintf("r%d", n), Digest: 42, IsError: true}}
	s, evs, err := Request(w, rec, results, []string{results[0].ID}, []string{"Read"}, now)
	if err != nil {
		t.Fatal(err)
	}
	return s, evs
}

func TestRequestOff(t *testing.T) {
	rec := thread()
	for i := range 5 {
		if s, evs := request(t, config.Watchdog{}, rec, i); s != (Step{}) || len(evs) != 0 {
			t.Fatalf("request %d with the watchdog off: %+v %v, want nothing", i, s, evs)
		}
	}
	if rec.Watch.Step != "" {
		t.Fatalf("the watch moved with the watchdog off: %+v", rec.Watch)
	}
}

func TestRequestEscalates(t *testing.T) {
	rec := thread()
	w := on()
	var steps []trajectory.LoopStep
	for i := range 6 {
		rec.Turns = int64(i) // one step per turn
		s, _ := request(t, w, rec, i)
		if s.Step != "" && (len(steps) == 0 || steps[len(steps)-1] != s.Step) {
			steps = append(steps, s.Step)
		}
		switch s.Step {
		case trajectory.LoopSteer:
			if s.Restrict {
				t.Errorf("steer restricts")
			}
		case trajectory.LoopRestrict:
			if !s.Restrict {
				t.Errorf("restrict does not restrict")
			}
		case trajectory.LoopPause:
			if rec.State != trajectory.Paused || rec.PauseReason != trajectory.PauseLoop {
				t.Fatalf("pause step leaves the record %s (%s), want PAUSED by the loop", rec.State, rec.PauseReason)
			}
		}
		if rec.State == trajectory.Paused {
			break
		}
	}
	want := []trajectory.LoopStep{trajectory.LoopSteer, trajectory.LoopRestrict, trajectory.LoopPause}
	if fmt.Sprint(steps) != fmt.Sprint(want) {
		t.Fatalf("steps %v, want %v", steps, want)
	}
}

func TestRequestNoticeOnce(t *testing.T) {
	rec := thread()
	w := on()
	var notices int
	for i := range 3 {
		s, _ := request(t, w, rec, i)
		if s.Notice != "" {
			notices++
		}
	}
	if notices != 1 {
		t.Fatalf("%d notices over one step, want 1", notices)
	}
}

func TestReplyAndSee(t *testing.T) {
	w := on()
	res := &streaming.Result{TextBytes: 0, ToolCalls: []streaming.ToolCall{
		{ID: "a", Name: "Bash", Arguments: []byte(`{"cmd":"ls"}`), Complete: true},
		{ID: "b", Name: "web", Server: true, Complete: true},                                  // the provider's own
		{ID: "c", Name: "Bash", Arguments: []byte(`{"cmd":"ls"}`)},                            // cut
		{ID: "d", Name: "Bash", Arguments: []byte(`{"cmd":"ls"}`), Complete: true, Choice: 1}, // another choice
	}}
	if See(config.Watchdog{}, res) != nil {
		t.Fatal("See reads a reply with the watchdog off")
	}
	seen := See(w, res)
	if seen == nil || len(seen.Calls) != 1 || seen.Calls[0].Name != "Bash" || seen.Text {
		t.Fatalf("See = %+v, want the one complete client call, no text", seen)
	}
	rec := thread()
	var step trajectory.LoopStep
	for i := range 4 {
		rec.Turns = int64(i)
		if _, err := Reply(w, rec, seen, now); err != nil {
			t.Fatal(err)
		}
		if step = rec.Watch.Step; step != "" {
			break
		}
	}
	if step != trajectory.LoopSteer {
		t.Fatalf("the same call proposed again and again: step %q, want steer", step)
	}
	if evs, err := Reply(w, rec, nil, now); err != nil || evs != nil {
		t.Fatalf("Reply of an unread reply: %v %v, want nothing", evs, err)
	}
}
