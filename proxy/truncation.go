package proxy

import (
	"time"

	"gatekeeper/proxy/internal/chainrule"
	"gatekeeper/proxy/internal/notice"
	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

func countTruncation(rec *trajectory.Record, stop string, max int, now time.Time) ([]trajectory.Event, error) {
	return chainrule.CountTruncation(rec, stop, max, now)
}

func truncationNotice(inRow int64) string { return notice.Truncation(inRow) }

func cutNotice(call streaming.ToolCall) string { return notice.Cut(call) }
