package shape

import (
	"strings"

	"gatekeeper/meter"
	"gatekeeper/trajectory"
)

// Note adds to a turn's event data what shaped its request: its stage
// when not nominal, the tools its stage removed, the loop watchdog's step.
func Note(data map[string]any, stage meter.Stage, removed []string, loop trajectory.LoopStep) {
	if stage != "" && stage != meter.Nominal {
		data["stage"] = stage
	}
	if len(removed) > 0 {
		data["removed_tools"] = strings.Join(removed, ",")
	}
	if loop != "" {
		data["loop_step"] = loop
	}
}
