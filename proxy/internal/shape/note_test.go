package shape

import (
	"maps"
	"testing"

	"gatekeeper/meter"
	"gatekeeper/trajectory"
)

func TestNote(t *testing.T) {
	tests := []struct {
		name    string
		stage   meter.Stage
		removed []string
		loop    trajectory.LoopStep
		want    map[string]any
	}{
		{name: "nominal", stage: meter.Nominal, want: map[string]any{}},
		{name: "no stage", want: map[string]any{}},
		{name: "restricted", stage: meter.Restrict, removed: []string{"Bash", "Write"},
			want: map[string]any{"stage": meter.Restrict, "removed_tools": "Bash,Write"}},
		{name: "loop step", stage: meter.Nominal, loop: trajectory.LoopSteer,
			want: map[string]any{"loop_step": trajectory.LoopSteer}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := map[string]any{}
			Note(data, tc.stage, tc.removed, tc.loop)
			if !maps.Equal(data, tc.want) {
				t.Errorf("data %v, want %v", data, tc.want)
			}
		})
	}
}
