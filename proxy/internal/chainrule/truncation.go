package chainrule

import (
	"fmt"
	"time"

	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

// CountTruncation counts, on the thread record of a turn that ended, a
// reply cut at its output limit: one more truncation, and one more in a
// row; any other stop ends the row. A row of max (the tenant's
// max_truncations; none when max ≤ 0) ends the run FAILED with exit reason
// TRUNCATION_LOOP: an agent that keeps asking for more than its limit lets
// through is spending its budget on replies it cannot use.
func CountTruncation(rec *trajectory.Record, stop string, max int, now time.Time) ([]trajectory.Event, error) {
	if stop != string(streaming.StopMaxTokens) {
		rec.TruncationsInRow = 0
		return nil, nil
	}
	rec.Truncations++
	rec.TruncationsInRow++
	if max <= 0 || rec.TruncationsInRow < int64(max) || rec.State.Terminal() || rec.State == trajectory.Finalizing {
		return nil, nil
	}
	ts, err := rec.Finalize(trajectory.Failed, ExitTruncationLoop, now)
	if err != nil {
		return nil, err
	}
	ev := Event(rec.ID, now, trajectory.EventUpstreamError, map[string]any{
		"detail": fmt.Sprintf("%d replies in a row were cut at their output limit (max_truncations %d)", rec.TruncationsInRow, max)})
	return append([]trajectory.Event{ev}, trajectory.EventsFor(rec.ID, ts)...), nil
}
