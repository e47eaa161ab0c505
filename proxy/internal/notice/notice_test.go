package notice

import (
	"strings"
	"testing"

	"gatekeeper/meter"
	"gatekeeper/trajectory"
)

func TestBudget(t *testing.T) {
	ls := []meter.Level{{ID: "run", Budget: trajectory.Budget{Turns: 10}, Used: meter.Used{Turns: 6}, Reserved: meter.Reservation{Turns: 1}}}
	tests := []struct {
		name  string
		stage meter.Stage
		want  []string
	}{
		{"steer", meter.Steer, []string{"70% of its turns budget", "3 model calls remain", "Plan to finish"}},
		{"restrict", meter.Restrict, []string{"Only read-only tools remain available (read_file, grep)", "final answer now"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Budget(meter.Decision{Rho: 0.7, Binding: meter.Turns, BindingID: "run", Stage: tc.stage}, ls, []string{"read_file", "grep"})
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("notice %q lacks %q", got, w)
				}
			}
		})
	}
	if got := Left(ls, meter.Decision{BindingID: "other", Binding: meter.Turns}); got != "" {
		t.Errorf("Left of a level not in the chain = %q, want none", got)
	}
}

func TestLoop(t *testing.T) {
	w := &trajectory.Watch{Signal: &trajectory.LoopSignal{Kind: trajectory.SignalRepeatedCall, Tool: "bash", Count: 3, Window: 5}}
	got := Loop(w, nil)
	if !strings.Contains(got, "same call to bash, with the same input, 3 times in your last 5") || !strings.Contains(got, "Change your approach") {
		t.Fatalf("loop notice %q", got)
	}
}
