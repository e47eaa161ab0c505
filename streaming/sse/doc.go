// Package sse reads and writes server-sent events, the framing every
// provider streams its replies in.
//
// It owns the Reader, one incremental reader (WHATWG event-stream rules)
// that hands back every event's raw bytes with its fields, so a caller can
// forward or hold exactly what came in; Each, which reads a whole stream
// held in memory through a Reader; and the few helpers that write an event
// (AppendFrame, FrameName, KeepBOM, TrimBOM). It knows nothing of any API.
package sse
