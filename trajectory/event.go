package trajectory

import (
	"encoding/json"
	"time"
)

// EventType names an entry of a trajectory's event log.
type EventType string

// The event log's entry types.
const (
	EventCreated           EventType = "created"
	EventTransition        EventType = "transition"
	EventTurn              EventType = "turn"
	EventToolResults       EventType = "tool_results"
	EventToolResultUnknown EventType = "tool_result_unknown"
	EventIllegalTransition EventType = "illegal_transition"
	EventControl           EventType = "control"
	EventUpstreamError     EventType = "upstream_error"
	EventStage             EventType = "stage" // the budget stage changed
	// EventToolCallsInDoubt lists tool calls the agent was given but never
	// answered before the run ended: they may or may not have run.
	EventToolCallsInDoubt EventType = "tool_calls_in_doubt"
	// EventBudgetClamp: a call's output limit was lowered (or set) so that
	// its worst case fits what its chain has left.
	EventBudgetClamp EventType = "budget_clamp"
	// EventChildrenFull warns that a record has limits.max_children
	// children: a further thread shares its last child.
	EventChildrenFull EventType = "children_full"
	// EventBudget: an operator changed a record's budget.
	EventBudget EventType = "budget"
	// EventOutcome: the run's outcome or task class was marked.
	EventOutcome EventType = "outcome"
	// EventLoop: the loop watchdog took a step (steer, restrict, pause,
	// fail), with the evidence.
	EventLoop EventType = "loop"
	// EventRefused: gatekeeper refused a request of the run (402, 403,
	// 429, 503...); written at most once per run every few seconds by each
	// replica, with how many refusals it folded.
	EventRefused EventType = "refused"
)

// Event is one entry of a trajectory's event log. Seq is assigned by the
// store when the event is saved: 1, 2, 3... per trajectory.
type Event struct {
	Seq        int64     `json:"seq"`
	At         time.Time `json:"at"`
	Trajectory string    `json:"trajectory"`
	Type       EventType `json:"type"`
	From       State     `json:"from,omitempty"`
	To         State     `json:"to,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	// Data carries the type's details (a turn's usage, the unknown result
	// IDs...) as JSON the caller built.
	Data json.RawMessage `json:"data,omitempty"`
}

// EventsFor turns transitions of trajectory id into transition events.
func EventsFor(id string, ts []Transition) []Event {
	if len(ts) == 0 {
		return nil
	}
	evs := make([]Event, len(ts))
	for i, t := range ts {
		evs[i] = Event{At: t.At, Trajectory: id, Type: EventTransition, From: t.From, To: t.To, Reason: t.Reason}
	}
	return evs
}
