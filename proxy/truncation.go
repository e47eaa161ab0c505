package proxy

import (
	"fmt"
	"time"

	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

// Exit reason of a run whose replies kept being cut at their output limit.
const exitTruncationLoop = "TRUNCATION_LOOP"

// countTruncation counts, on the thread record of a turn that ended, a
// reply cut at its output limit: one more truncation, and one more in a
// row; any other stop ends the row. A row of max (the tenant's
// max_truncations; none when max ≤ 0) ends the run FAILED with exit reason
// TRUNCATION_LOOP: an agent that keeps asking for more than its limit lets
// through is spending its budget on replies it cannot use.
func countTruncation(rec *trajectory.Record, stop string, max int, now time.Time) ([]trajectory.Event, error) {
	if stop != string(streaming.StopMaxTokens) {
		rec.TruncationsInRow = 0
		return nil, nil
	}
	rec.Truncations++
	rec.TruncationsInRow++
	if max <= 0 || rec.TruncationsInRow < int64(max) || rec.State.Terminal() || rec.State == trajectory.Finalizing {
		return nil, nil
	}
	ts, err := rec.Finalize(trajectory.Failed, exitTruncationLoop, now)
	if err != nil {
		return nil, err
	}
	ev := eventWith(rec.ID, now, trajectory.EventUpstreamError, map[string]any{
		"detail": fmt.Sprintf("%d replies in a row were cut at their output limit (max_truncations %d)", rec.TruncationsInRow, max)})
	return append([]trajectory.Event{ev}, trajectory.EventsFor(rec.ID, ts)...), nil
}

// truncationNotice is the text the next request of a thread whose last
// reply was cut at its output limit carries, so that the model knows why
// it has no result for a call it was writing.
func truncationNotice(inRow int64) string {
	return fmt.Sprintf("[gatekeeper] Your previous reply was cut at its output limit (%d in a row). A tool call you were writing in it was not delivered and did not run; do not wait for its result. Keep replies and tool inputs shorter, or split the work into smaller steps.", inRow)
}

// cutNotice replaces, in a streamed reply, a tool call the reply was still
// writing when it reached its output limit: the agent learns that the call
// was asked for and did not run.
func cutNotice(call streaming.ToolCall) string {
	return fmt.Sprintf("[gatekeeper] This reply reached its output limit while writing a call to %s; the call was cut short, so it was not delivered and did not run. Retry it with shorter input, or split the work into smaller steps.", call.Name)
}
