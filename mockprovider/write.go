package mockprovider

import (
	"bytes"
	"compress/gzip"
	"math/rand/v2"
	"strconv"
	"strings"
)

// event is one server-sent event of a reply.
type event struct {
	name    string // "event:" line; empty for Chat Completions
	data    []byte
	crlf    bool // lines end with CRLF, as Gemini's do
	delta   bool // a content delta: text or tool-call arguments
	trailer bool // part of the normal ending (stop, usage, terminator)
}

func (e event) appendTo(b []byte) []byte {
	if e.name != "" {
		b = append(b, "event: "...)
		b = append(b, e.name...)
		b = append(b, '\n')
	}
	b = append(b, "data: "...)
	b = append(b, e.data...)
	if e.crlf {
		return append(b, "\r\n\r\n"...)
	}
	return append(b, '\n', '\n')
}

// renderStream renders a plan as its API's event stream, cut and ended
// with the provider's error event when the plan says so.
func renderStream(p *plan, rnd *rand.Rand, requestID string) []event {
	var events []event
	switch p.api {
	case APIAnthropic:
		events = anthropicStream(p, rnd)
	case APIChat:
		events = chatStream(p, rnd)
	case APIResponses:
		events = responsesStream(p, rnd)
	case APIGemini:
		events = geminiStream(p)
	}
	if p.fail == failNone {
		return events
	}
	events = cutAfterDeltas(events, p.failAfter)
	if p.fail == failError {
		switch p.api {
		case APIAnthropic:
			events = append(events, anthropicErrorEvent(p, requestID))
		case APIChat:
			events = append(events, chatErrorEvent(p))
		case APIResponses:
			events = append(events, responsesErrorEvents(p, len(events))...)
		case APIGemini:
			events = append(events, geminiErrorEvent(p))
		}
	}
	return events
}

// cutAfterDeltas keeps the events up to the n-th content delta; with fewer
// deltas than n it keeps everything before the normal ending.
func cutAfterDeltas(events []event, n int) []event {
	seen := 0
	for i, ev := range events {
		if ev.trailer {
			return events[:i]
		}
		if ev.delta {
			seen++
			if seen >= n {
				return events[:i+1]
			}
		}
	}
	return events
}

func renderBody(p *plan) []byte {
	switch p.api {
	case APIAnthropic:
		return appendJSON(nil, anthropicMessage(p))
	case APIChat:
		return appendJSON(nil, chatCompletion(p))
	case APIGemini:
		return appendJSON(nil, geminiResponse(p))
	default:
		return appendJSON(nil, responseObject(p, terminalStatus(p), responseOutput(p), responsesUsage(p), nil))
	}
}

// writeJSON sends a JSON body in the turn's Encoding, else gzipped when
// the client accepts gzip, as the providers do (they never compress a
// stream).
func (x *exchange) writeJSON(status int, body []byte) {
	h := x.w.Header()
	h.Set("Content-Type", "application/json")
	if x.enc.coding != "" {
		body = x.enc.body(h, body)
	} else if acceptsGzip(x.r.Header.Get("Accept-Encoding")) {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(body) // writes to a bytes.Buffer do not fail
		_ = zw.Close()
		body = buf.Bytes()
		h.Set("Content-Encoding", "gzip")
		h.Add("Vary", "Accept-Encoding")
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	x.w.WriteHeader(status)
	if _, err := x.w.Write(body); err != nil {
		x.s.update(x.rec, func(rec *RecordedRequest) { rec.Canceled = true })
	}
}

// acceptsGzip reads an Accept-Encoding header: gzip (or *) listed with a
// non-zero quality.
func acceptsGzip(v string) bool {
	for part := range strings.SplitSeq(v, ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		coding = strings.ToLower(strings.TrimSpace(coding))
		if coding != "gzip" && coding != "*" {
			continue
		}
		q := 1.0
		for p := range strings.SplitSeq(params, ";") {
			if k, val, ok := strings.Cut(strings.TrimSpace(p), "="); ok && strings.TrimSpace(k) == "q" {
				if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
					q = f
				}
			}
		}
		if q > 0 {
			return true
		}
	}
	return false
}
