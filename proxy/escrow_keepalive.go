package proxy

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"

	"gatekeeper/config"

	"gatekeeper/streaming"
	"gatekeeper/streaming/sse"
)

// A held stream must look alive to the agent for as long as people take to
// decide, and the agents' idle watchdogs count only events their SDK hands
// them: Claude Code aborts a reply after 300 s without one (and does not
// retry once a content block was shown), Codex after stream_idle_timeout_ms
// (300 s, then a retry of the turn, at most stream_max_retries times). The
// Anthropic SDKs drop ping events and every SSE parser drops comments, so
// neither resets them. The keepalive of a held stream is therefore an event
// the SDK does yield but that leaves the reply it accumulates as it is:
//
//   - Anthropic: a message_delta with a null stop_reason and the output
//     usage the client already has. The SDKs' accumulators set the stop
//     reason and usage from it; the held reply's own message_delta sets
//     both again before message_stop.
//   - OpenAI Responses: the reply's own response.in_progress event again
//     (the response.created event renamed when the provider sent no
//     in_progress): the same response object, which accumulators ignore and
//     Codex skips after counting it.
//   - OpenAI Chat Completions: an SSE comment, as there is no chunk that
//     changes nothing for every SDK.

// The same keepalive covers a call held while it streams: what the provider
// sends after the call's first event waits behind it, so that the agent
// gets the provider's events in their order (streaming.CallFilter's Hold),
// and a call whose input takes longer than approvals.keepalive to stream
// would otherwise leave the agent without an event for that long.

// aliveTracker builds a held stream's keepalive from the events forwarded
// before the hold.
type aliveTracker struct {
	output int64  // Anthropic: the output tokens the client was told of
	seen   bool   // Anthropic: message_start went out
	event  []byte // Responses: the in_progress event to repeat
}

// forwarded notes an event of an api stream that went to the client; res
// is the decoder's result once the event was decoded.
func (a *aliveTracker) forwarded(api streaming.API, ev *sse.Event, res *streaming.Result) {
	switch api {
	case streaming.APIAnthropic:
		if string(ev.Name) == "message_start" {
			a.seen = true
		}
		a.output = res.Usage.OutputTokens
	case streaming.APIResponses:
		switch string(ev.Name) {
		case "response.in_progress":
			if !ev.Unterminated {
				a.event = bytes.Clone(ev.Raw)
			}
		case "response.created":
			if a.event == nil {
				a.event = inProgressEvent(ev.Data)
			}
		}
	}
}

// keepalive is the event a held stream gets every approvals.keepalive.
// Before the reply's opening event went out there is nothing an SDK would
// take without changing its reply, and the plain keepalive is used.
func (a *aliveTracker) keepalive(api streaming.API) []byte {
	switch {
	case api == streaming.APIAnthropic && a.seen:
		return anthropicAlive(a.output)
	case api == streaming.APIResponses && a.event != nil:
		return a.event
	}
	return keepalive(api)
}

// keepaliveEvery is the period of keepalives on a held stream, and the
// longest a held call's stream leaves the agent without one.
func (s *Server) keepaliveEvery() time.Duration {
	if d := s.cfg.Approvals.Keepalive.Std(); d > 0 {
		return d
	}
	return config.DefaultKeepalive
}

// anthropicAlive is a message_delta that reports no stop and n output
// tokens.
func anthropicAlive(n int64) []byte {
	b := []byte("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":null,\"stop_sequence\":null},\"usage\":{\"output_tokens\":")
	b = strconv.AppendInt(b, n, 10)
	return append(b, "}}\n\n"...)
}

// inProgressEvent turns the data of a response.created event into a
// response.in_progress event carrying the same response object, or nil
// when the data is not a JSON object with a response object.
func inProgressEvent(data []byte) []byte {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil
	}
	if resp := bytes.TrimSpace(fields["response"]); len(resp) == 0 || resp[0] != '{' {
		return nil
	}
	fields["type"] = json.RawMessage(`"response.in_progress"`)
	out, err := json.Marshal(fields)
	if err != nil {
		return nil
	}
	b := append([]byte("event: response.in_progress\ndata: "), out...)
	return append(b, "\n\n"...)
}
