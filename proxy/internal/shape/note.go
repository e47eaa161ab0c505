package shape

import (
	"gatekeeper/meter"
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/trajectory"
)

// Note adds to a turn's event data what shaped its request: its stage
// when not nominal, the tools its stage removed, the loop watchdog's step.
func Note(data *outcome.TurnData, stage meter.Stage, removed []string, loop trajectory.LoopStep) {
	if stage != "" && stage != meter.Nominal {
		data.Stage = stage
	}
	if len(removed) > 0 {
		data.RemovedTools = removed
	}
	if loop != "" {
		data.LoopStep = loop
	}
}
