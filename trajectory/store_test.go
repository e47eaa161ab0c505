package trajectory

import "testing"

func TestFilterMatch(t *testing.T) {
	root, child := "", "run-1"
	r := &Record{ID: "run-1/a", ParentID: "run-1", Tenant: "team-a", State: WaitingTool, BudgetUsed: 0.5}
	tests := []struct {
		name string
		f    Filter
		want bool
	}{
		{"zero filter", Filter{}, true},
		{"state matches", Filter{State: WaitingTool}, true},
		{"state differs", Filter{State: Ready}, false},
		{"tenant matches", Filter{Tenant: "team-a"}, true},
		{"tenant differs", Filter{Tenant: "team-b"}, false},
		{"budget at threshold", Filter{MinBudgetUsed: 0.5}, true},
		{"budget below threshold", Filter{MinBudgetUsed: 0.51}, false},
		{"children of parent", Filter{ParentID: &child}, true},
		{"roots only", Filter{ParentID: &root}, false},
		{"all conditions", Filter{State: WaitingTool, Tenant: "team-a", MinBudgetUsed: 0.1, ParentID: &child}, true},
		{"one condition fails", Filter{State: WaitingTool, Tenant: "team-a", MinBudgetUsed: 0.9}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.f.Match(r); got != tc.want {
				t.Errorf("Match = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPageLimit(t *testing.T) {
	tests := []struct {
		name string
		in   int
		want int
	}{
		{"zero is default", 0, DefaultListLimit},
		{"negative is default", -5, DefaultListLimit},
		{"small kept", 7, 7},
		{"max kept", MaxListLimit, MaxListLimit},
		{"over max cut", MaxListLimit + 1, MaxListLimit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := PageLimit(tc.in); got != tc.want {
				t.Errorf("PageLimit(%d) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}
