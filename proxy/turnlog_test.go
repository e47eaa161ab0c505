package proxy_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// logLines are the JSON log lines of logs that have every field of want.
func logLines(t *testing.T, logs *lockedBuffer, want map[string]any) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(logs.String()) {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		ok := true
		for k, v := range want {
			ok = ok && m[k] == v
		}
		if ok {
			out = append(out, m)
		}
	}
	return out
}

// TestTurnLoggedOnlyWhenCharged: "turn" is logged for a charge written;
// a call the provider refused (500, 529) or that never reached it (502)
// is logged "turn not charged" with the reason, never "turn".
func TestTurnLoggedOnlyWhenCharged(t *testing.T) {
	tests := []struct {
		name     string
		upstream string // base_url override
		spec     string
		status   int
		msg      string
		reason   string
	}{
		{"charged", "", `{"kind":"text","text":"done"}`, http.StatusOK, "turn", ""},
		{"provider 529", "", `{"kind":"http_error","status":529}`, 529, "turn not charged", "the provider answered 529"},
		{"provider 500", "", `{"kind":"http_error","status":500}`, 500, "turn not charged", "the provider answered 500"},
		{"provider unreachable", "http://127.0.0.1:1", `{"kind":"text"}`, http.StatusBadGateway, "turn not charged", "no reply from the provider: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logs := &lockedBuffer{}
			e := newEnv(t, envOpts{log: logs, upstream: tc.upstream})
			resp := e.do(t, "POST", "/t/logged/anthropic/v1/messages", anthropicReq(false, "hi"), hdr("X-Mock-Turn", tc.spec)...)
			if b := readAll(t, resp); resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			var got []map[string]any
			waitFor(t, "the turn's log line", func() bool {
				got = logLines(t, logs, map[string]any{"trajectory": "logged"})
				for _, m := range got {
					if m["msg"] == "turn" || m["msg"] == "turn not charged" {
						return true
					}
				}
				return false
			})
			var lines int
			for _, m := range got {
				switch m["msg"] {
				case "turn", "turn not charged":
					lines++
					reason, _ := m["reason"].(string)
					if m["msg"] != tc.msg || !strings.HasPrefix(reason, tc.reason) || (tc.reason == "") != (reason == "") {
						t.Errorf("logged %q reason %q, want %q reason %q", m["msg"], reason, tc.msg, tc.reason)
					}
				}
			}
			if lines != 1 {
				t.Errorf("%d turn lines, want 1", lines)
			}
			if rec := e.record(t, "logged"); (rec.Turns == 1) != (tc.reason == "") {
				t.Errorf("record counts %d turns, charged: %v", rec.Turns, tc.reason == "")
			}
		})
	}
}
