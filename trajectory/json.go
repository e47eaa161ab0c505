package trajectory

import (
	"encoding/json"
	"fmt"
	"time"
)

// The JSON form is the admin API's (docs/reference/admin-api.md): snake_case, parent_id, exit_reason,
// approval_id and control null when empty, children and tool_calls always
// arrays. Wire structs keep the Go types free of pointer-for-null fields.
// UnmarshalJSON reads them; AppendJSON (json_append.go) writes what
// encoding/json would write for them, byte for byte, without reflection.
// A field added here must be added there too: the differential tests
// compare the two.

type recordJSON struct {
	ID               string      `json:"id"`
	ParentID         *string     `json:"parent_id"`
	Tenant           string      `json:"tenant"`
	State            State       `json:"state"`
	ExitReason       *string     `json:"exit_reason"`
	Turns            int64       `json:"turns"`
	LastStopReason   string      `json:"last_stop_reason"`
	CreatedAt        time.Time   `json:"created_at"`
	UpdatedAt        time.Time   `json:"updated_at"`
	CreatedBy        Creator     `json:"created_by,omitzero"`
	Budget           Budget      `json:"budget"`
	Spend            Spend       `json:"spend"`
	BudgetUsed       float64     `json:"budget_used"`
	BindingDimension string      `json:"binding_dimension"`
	Stage            string      `json:"stage"`
	Pending          pendingJSON `json:"pending"`
	Children         []string    `json:"children"`
	Thread           string      `json:"thread,omitempty"`
	Provider         string      `json:"provider,omitempty"`
	Model            string      `json:"model,omitempty"`
	StartedAt        time.Time   `json:"started_at,omitzero"`
	Reserved         Reservation `json:"reserved,omitzero"`
	Call             string      `json:"call,omitempty"`
	CallReserved     Reservation `json:"call_reserved,omitzero"`
	SettledCall      string      `json:"settled_call,omitempty"`
	CallOwner        string      `json:"call_owner,omitempty"`
	CallBeat         time.Time   `json:"call_beat,omitzero"`
	CallInput        int64       `json:"call_input_tokens,omitzero"`
	CallOutput       int64       `json:"call_output_tokens,omitzero"`
	LostCalls        []string    `json:"lost_calls,omitempty"`
	SweptCalls       []SweptCall `json:"swept_calls,omitempty"`
	FallbackPriced   bool        `json:"fallback_priced,omitempty"`
	HeldSince        time.Time   `json:"held_since,omitzero"`
	WaitedS          float64     `json:"waited_s,omitzero"`
	PauseReason      string      `json:"pause_reason,omitempty"`
	Truncations      int64       `json:"truncations,omitzero"`
	TruncationsInRow int64       `json:"truncations_in_row,omitzero"`
	Outcome          string      `json:"outcome,omitempty"`
	TaskClass        string      `json:"task_class,omitempty"`
	Watch            *Watch      `json:"watch,omitempty"`
	Person           *Person     `json:"person,omitempty"`
}

type pendingJSON struct {
	ToolCalls  []pendingCallJSON `json:"tool_calls"`
	ApprovalID *string           `json:"approval_id"`
	Control    *Control          `json:"control"`
}

type pendingCallJSON struct {
	ID       string     `json:"id"`
	Name     string     `json:"name"`
	Deadline *time.Time `json:"deadline"`
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// MarshalJSON writes the record as the admin API returns it: the wire
// structs above as encoding/json would write them, written by AppendJSON.
func (r Record) MarshalJSON() ([]byte, error) {
	b, err := r.AppendJSON(make([]byte, 0, r.sizeJSON()))
	if err != nil {
		return nil, err
	}
	return b, nil
}

// UnmarshalJSON reads what MarshalJSON writes. A record whose state is not
// one of the nine is refused: a store never hands back a record the state
// machine cannot reason about.
func (r *Record) UnmarshalJSON(b []byte) error {
	var w recordJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if !w.State.Valid() {
		return fmt.Errorf("%w: unknown state %q", ErrInvalidRecord, w.State)
	}
	rec := Record{
		ID:               w.ID,
		ParentID:         deref(w.ParentID),
		Tenant:           w.Tenant,
		State:            w.State,
		ExitReason:       deref(w.ExitReason),
		Turns:            w.Turns,
		LastStopReason:   w.LastStopReason,
		CreatedAt:        w.CreatedAt,
		UpdatedAt:        w.UpdatedAt,
		CreatedBy:        w.CreatedBy,
		Budget:           w.Budget,
		Spend:            w.Spend,
		BudgetUsed:       w.BudgetUsed,
		BindingDimension: w.BindingDimension,
		Stage:            w.Stage,
		Pending: Pending{
			ApprovalID: deref(w.Pending.ApprovalID),
			Control:    w.Pending.Control,
		},
		Thread:    w.Thread,
		Provider:  w.Provider,
		Model:     w.Model,
		StartedAt: w.StartedAt,

		Reserved:       w.Reserved,
		Call:           w.Call,
		CallReserved:   w.CallReserved,
		SettledCall:    w.SettledCall,
		CallOwner:      w.CallOwner,
		CallBeat:       w.CallBeat,
		CallInput:      w.CallInput,
		CallOutput:     w.CallOutput,
		LostCalls:      w.LostCalls,
		SweptCalls:     w.SweptCalls,
		FallbackPriced: w.FallbackPriced,
		HeldSince:      w.HeldSince,
		WaitedS:        w.WaitedS,

		PauseReason:      w.PauseReason,
		Truncations:      w.Truncations,
		TruncationsInRow: w.TruncationsInRow,
		Outcome:          w.Outcome,
		TaskClass:        w.TaskClass,
		Person:           w.Person,
	}
	if w.Watch != nil {
		rec.Watch = *w.Watch
	}
	if len(w.Children) > 0 {
		rec.Children = w.Children
	}
	if len(w.Pending.ToolCalls) > 0 {
		rec.Pending.ToolCalls = make([]PendingCall, len(w.Pending.ToolCalls))
		for i, c := range w.Pending.ToolCalls {
			rec.Pending.ToolCalls[i] = PendingCall{ID: c.ID, Name: c.Name}
			if c.Deadline != nil {
				rec.Pending.ToolCalls[i].Deadline = *c.Deadline
			}
		}
	}
	*r = rec
	return nil
}
