package trajectory

import "encoding/json"

// marshalReflect is MarshalJSON as it was before AppendJSON: the wire
// structs of json.go filled in and handed to encoding/json. It is the
// oracle AppendJSON must match byte for byte.
func marshalReflect(r *Record) ([]byte, error) {
	w := recordJSON{
		ID:               r.ID,
		ParentID:         nullable(r.ParentID),
		Tenant:           r.Tenant,
		State:            r.State,
		ExitReason:       nullable(r.ExitReason),
		Turns:            r.Turns,
		LastStopReason:   r.LastStopReason,
		CreatedAt:        r.CreatedAt,
		UpdatedAt:        r.UpdatedAt,
		CreatedBy:        r.CreatedBy,
		Budget:           r.Budget,
		Spend:            r.Spend,
		BudgetUsed:       r.BudgetUsed,
		BindingDimension: r.BindingDimension,
		Stage:            r.Stage,
		Pending: pendingJSON{
			ToolCalls:  make([]pendingCallJSON, len(r.Pending.ToolCalls)),
			ApprovalID: nullable(r.Pending.ApprovalID),
			Control:    r.Pending.Control,
		},
		Children:  r.Children,
		Thread:    r.Thread,
		Provider:  r.Provider,
		Model:     r.Model,
		StartedAt: r.StartedAt,

		Reserved:       r.Reserved,
		Call:           r.Call,
		CallReserved:   r.CallReserved,
		SettledCall:    r.SettledCall,
		CallOwner:      r.CallOwner,
		CallBeat:       r.CallBeat,
		CallInput:      r.CallInput,
		CallOutput:     r.CallOutput,
		LostCalls:      r.LostCalls,
		SweptCalls:     r.SweptCalls,
		FallbackPriced: r.FallbackPriced,
		HeldSince:      r.HeldSince,
		WaitedS:        r.WaitedS,

		PauseReason:      r.PauseReason,
		Truncations:      r.Truncations,
		TruncationsInRow: r.TruncationsInRow,
		Outcome:          r.Outcome,
		TaskClass:        r.TaskClass,
		Person:           r.Person,
	}
	if !r.Watch.IsZero() {
		w.Watch = &r.Watch
	}
	if w.Children == nil {
		w.Children = []string{}
	}
	for i, c := range r.Pending.ToolCalls {
		w.Pending.ToolCalls[i] = pendingCallJSON{ID: c.ID, Name: c.Name}
		if !c.Deadline.IsZero() {
			w.Pending.ToolCalls[i].Deadline = &c.Deadline
		}
	}
	return json.Marshal(w)
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
