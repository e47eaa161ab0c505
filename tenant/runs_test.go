package tenant

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// runs is a Runs that refuses with refuse until the runs in ended are
// ended, and records what it was asked.
type runs struct {
	live   []string
	refuse string // LimitLive or LimitNewPerHour while live is full
	max    int
	ended  []string
	starts int
}

func (r *runs) StartRun(_ context.Context, _, id string, _ Limits) (Start, error) {
	r.starts++
	if len(r.live) >= r.max {
		return Start{Refused: r.refuse}, nil
	}
	r.live = append(r.live, id)
	return Start{}, nil
}

func (r *runs) LiveRuns(context.Context, string) ([]string, error) { return slices.Clone(r.live), nil }

func (r *runs) EndRuns(_ context.Context, _ string, ids ...string) error {
	r.ended = append(r.ended, ids...)
	r.live = slices.DeleteFunc(r.live, func(id string) bool { return slices.Contains(ids, id) })
	return nil
}

var _ Runs = (*runs)(nil)

func TestStartRun(t *testing.T) {
	done := func(ids ...string) Finished {
		return func(_ context.Context, live []string) ([]string, error) {
			var out []string
			for _, id := range live {
				if slices.Contains(ids, id) {
					out = append(out, id)
				}
			}
			return out, nil
		}
	}
	cases := []struct {
		name     string
		r        *runs
		finished Finished
		refused  string
		starts   int
		ended    []string
	}{
		{"room", &runs{max: 2, refuse: LimitLive, live: []string{"a"}}, done(), "", 1, nil},
		{"live full, one finished", &runs{max: 2, refuse: LimitLive, live: []string{"a", "b"}}, done("b"), "", 2, []string{"b"}},
		{"live full, none finished", &runs{max: 2, refuse: LimitLive, live: []string{"a", "b"}}, done(), LimitLive, 1, nil},
		{"hourly full: nothing pruned", &runs{max: 2, refuse: LimitNewPerHour, live: []string{"a", "b"}}, done("b"), LimitNewPerHour, 1, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, err := StartRun(context.Background(), tc.r, "team-a", "new", Limits{MaxLive: 2}, tc.finished)
			if err != nil || st.Refused != tc.refused || tc.r.starts != tc.starts || !slices.Equal(tc.r.ended, tc.ended) {
				t.Fatalf("StartRun = %+v, %v after %d starts, ended %v; want refused %q after %d, ended %v",
					st, err, tc.r.starts, tc.r.ended, tc.refused, tc.starts, tc.ended)
			}
		})
	}
	boom := errors.New("store down")
	_, err := StartRun(context.Background(), &runs{max: 1, refuse: LimitLive, live: []string{"a"}}, "team-a", "new", Limits{MaxLive: 1},
		func(context.Context, []string) ([]string, error) { return nil, boom })
	if !errors.Is(err, boom) {
		t.Fatalf("a failing look at the finished runs: %v", err)
	}
}
