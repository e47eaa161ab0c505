package shape

import (
	"reflect"
	"strings"
	"testing"

	"gatekeeper/meter"
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/trajectory"
)

func TestNote(t *testing.T) {
	tests := []struct {
		name    string
		stage   meter.Stage
		removed []string
		loop    trajectory.LoopStep
		want    outcome.TurnData
		json    string // what the event's data says of it, the keys of Note
	}{
		{name: "nominal", stage: meter.Nominal},
		{name: "no stage"},
		{name: "restricted", stage: meter.Restrict, removed: []string{"Bash", "Write"},
			want: outcome.TurnData{Stage: meter.Restrict, RemovedTools: []string{"Bash", "Write"}},
			json: `"removed_tools":"Bash,Write","stage":"restrict"`},
		{name: "loop step", stage: meter.Nominal, loop: trajectory.LoopSteer,
			want: outcome.TurnData{LoopStep: trajectory.LoopSteer}, json: `"loop_step":"steer"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var data outcome.TurnData
			Note(&data, tc.stage, tc.removed, tc.loop)
			if !reflect.DeepEqual(data, tc.want) {
				t.Errorf("data %+v, want %+v", data, tc.want)
			}
			raw, err := data.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			for _, key := range []string{`"stage":`, `"removed_tools":`, `"loop_step":`} {
				if strings.Contains(string(raw), key) != strings.Contains(tc.json, key) {
					t.Errorf("JSON %s, want it to say %s", raw, tc.json)
				}
			}
			if !strings.Contains(string(raw), tc.json) {
				t.Errorf("JSON %s, want it to say %s", raw, tc.json)
			}
		})
	}
}
