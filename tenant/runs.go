package tenant

import "context"

// Runs is what StartRun needs of a Ledger: its count of runs.
type Runs interface {
	StartRun(ctx context.Context, tenant, id string, lim Limits) (Start, error)
	LiveRuns(ctx context.Context, tenant string) ([]string, error)
	EndRuns(ctx context.Context, tenant string, ids ...string) error
}

var _ Runs = Ledger(nil)

// Finished picks, of the run ids a ledger counts live, those that have
// finished or no longer exist: the ledger learns of a run's end only
// when it is asked to start another.
type Finished func(ctx context.Context, ids []string) ([]string, error)

// StartRun counts run id of tenant name against its live and hourly
// ceilings (Ledger.StartRun), whoever starts it: an agent's request or an
// operator. When the live ceiling refuses it, the runs counted live that
// finished are forgotten and it is asked once more.
func StartRun(ctx context.Context, l Runs, name, id string, lim Limits, finished Finished) (Start, error) {
	st, err := l.StartRun(ctx, name, id, lim)
	if err != nil || st.Refused != LimitLive {
		return st, err
	}
	ids, err := l.LiveRuns(ctx, name)
	if err != nil {
		return st, err
	}
	ended, err := finished(ctx, ids)
	if err != nil || len(ended) == 0 {
		return st, err
	}
	if err := l.EndRuns(ctx, name, ended...); err != nil {
		return st, err
	}
	return l.StartRun(ctx, name, id, lim)
}
