package outcome

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"gatekeeper/meter"
	"gatekeeper/trajectory"
)

// TurnData is what a turn's event says of it, its Data: EventData fills
// it from the outcome, shape.Note adds what shaped the request, and the
// settle's rules mark a late reply. AppendJSON writes it as an object
// whose keys are its fields' names in snake case (DurationMS as
// "duration_ms"), in sorted order; a field marked optional is left out
// when zero.
type TurnData struct {
	Call     string // the call's id
	Stop     string
	Status   int
	Model    string // the model that ran
	Provider string
	// DurationMS is how long the turn took, in whole milliseconds.
	DurationMS int64
	Estimated  bool
	Usage      trajectory.Usage
	Dollars    float64
	// FallbackPriced (optional): a reply charged at the fallback price.
	FallbackPriced bool
	// ToolCalls and HostedCalls (optional) are the turn's calls, each
	// written as {"id", "name"}.
	ToolCalls   []trajectory.PendingCall
	HostedCalls []trajectory.PendingCall
	Detail      string // optional
	// Stage (optional) is the budget's stage when not nominal.
	Stage meter.Stage
	// RemovedTools (optional) are the tools the stage removed, written
	// as one string, comma-separated.
	RemovedTools []string
	// LoopStep (optional) is the loop watchdog's step.
	LoopStep trajectory.LoopStep
	// Late (optional): the reply of a call taken for lost.
	Late bool
}

// markLate marks d as the late reply of a call its thread took for lost.
func (d *TurnData) markLate() {
	d.Late = true
	d.Detail = strings.TrimPrefix(d.Detail+"; ", "; ") +
		"the call had been taken for lost and its reservation released; its reply arrived later and is charged"
}

// markSwept marks d as the late reply of a call its thread took for lost
// and charged as est.
func (d *TurnData) markSwept(est trajectory.SweptCall) {
	d.Late = true
	d.Detail = strings.TrimPrefix(d.Detail+"; ", "; ") + fmt.Sprintf(
		"the call had been taken for lost and charged as estimated (%d input and %d output tokens, $%g); its reply arrived later and its charge replaces the estimate",
		est.InputTokens, est.OutputTokens, est.Dollars)
}

// MarshalJSON is AppendJSON's form of d.
func (d TurnData) MarshalJSON() ([]byte, error) {
	return d.AppendJSON(make([]byte, 0, d.sizeJSON()))
}

// sizeJSON is a guess of d's JSON length: keys and figures take about 330
// bytes, to which its strings add theirs.
func (d *TurnData) sizeJSON() int {
	n := 330 + len(d.Call) + len(d.Stop) + len(d.Model) + len(d.Provider) + len(d.Usage.ServiceTier) +
		len(d.Detail) + len(d.Stage) + len(d.LoopStep)
	for _, c := range d.ToolCalls {
		n += len(c.ID) + len(c.Name) + 20
	}
	for _, c := range d.HostedCalls {
		n += len(c.ID) + len(c.Name) + 20
	}
	for _, t := range d.RemovedTools {
		n += len(t) + 1
	}
	return n
}

// AppendJSON appends d's JSON form to dst: what json.Marshal writes of the
// map of d's keys (sorted, strings HTML-escaped, floats as encoding/json
// writes them), byte for byte, without reflection, since every turn
// writes one. Dollars that are NaN or infinite, which encoding/json
// refuses, make it return dst unchanged and encoding/json's error.
func (d *TurnData) AppendJSON(dst []byte) ([]byte, error) {
	b := append(dst, `{"call":`...)
	b = trajectory.AppendJSONString(b, d.Call)
	if d.Detail != "" {
		b = append(b, `,"detail":`...)
		b = trajectory.AppendJSONString(b, d.Detail)
	}
	b = append(b, `,"dollars":`...)
	b, ok := trajectory.AppendJSONFloat(b, d.Dollars)
	if !ok {
		_, err := json.Marshal(d.Dollars)
		return dst, err
	}
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendInt(b, d.DurationMS, 10)
	b = append(b, `,"estimated":`...)
	b = strconv.AppendBool(b, d.Estimated)
	if d.FallbackPriced {
		b = append(b, `,"fallback_priced":true`...)
	}
	if len(d.HostedCalls) > 0 {
		b = appendCalls(append(b, `,"hosted_calls":`...), d.HostedCalls)
	}
	if d.Late {
		b = append(b, `,"late":true`...)
	}
	if d.LoopStep != "" {
		b = append(b, `,"loop_step":`...)
		b = trajectory.AppendJSONString(b, string(d.LoopStep))
	}
	b = append(b, `,"model":`...)
	b = trajectory.AppendJSONString(b, d.Model)
	b = append(b, `,"provider":`...)
	b = trajectory.AppendJSONString(b, d.Provider)
	if len(d.RemovedTools) > 0 {
		b = append(b, `,"removed_tools":`...)
		b = trajectory.AppendJSONString(b, strings.Join(d.RemovedTools, ","))
	}
	if d.Stage != "" {
		b = append(b, `,"stage":`...)
		b = trajectory.AppendJSONString(b, string(d.Stage))
	}
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(d.Status), 10)
	b = append(b, `,"stop":`...)
	b = trajectory.AppendJSONString(b, d.Stop)
	if len(d.ToolCalls) > 0 {
		b = appendCalls(append(b, `,"tool_calls":`...), d.ToolCalls)
	}
	b = appendUsage(append(b, `,"usage":`...), &d.Usage)
	return append(b, '}'), nil
}

// appendCalls writes calls as a list of {"id", "name"} objects.
func appendCalls(b []byte, calls []trajectory.PendingCall) []byte {
	b = append(b, '[')
	for i := range calls {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = trajectory.AppendJSONString(b, calls[i].ID)
		b = append(b, `,"name":`...)
		b = trajectory.AppendJSONString(b, calls[i].Name)
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendUsage writes u as its struct's json tags do, in its fields' order.
func appendUsage(b []byte, u *trajectory.Usage) []byte {
	b = append(b, `{"input_tokens":`...)
	b = strconv.AppendInt(b, u.InputTokens, 10)
	b = append(b, `,"cached_input_tokens":`...)
	b = strconv.AppendInt(b, u.CachedInputTokens, 10)
	b = append(b, `,"cache_write_tokens":`...)
	b = strconv.AppendInt(b, u.CacheWriteTokens, 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, u.OutputTokens, 10)
	if u.CacheWrite1hTokens != 0 {
		b = append(b, `,"cache_write_1h_tokens":`...)
		b = strconv.AppendInt(b, u.CacheWrite1hTokens, 10)
	}
	if u.ServiceTier != "" {
		b = append(b, `,"service_tier":`...)
		b = trajectory.AppendJSONString(b, u.ServiceTier)
	}
	return append(b, '}')
}
