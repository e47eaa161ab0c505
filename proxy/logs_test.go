package proxy_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"gatekeeper/trajectory"
)

// lockedBuffer collects log output written from many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLogsHoldNoSecrets runs turns on each API, a pass-through, an admin
// control request and refused requests with gatekeeper's log at debug
// level, then looks for every secret and prompt of the run in the log.
func TestLogsHoldNoSecrets(t *testing.T) {
	logs := &lockedBuffer{}
	e := newEnv(t, envOpts{log: logs})
	const prompt = "the launch codes are 0000-SECRET-PROMPT"
	readAll(t, e.do(t, "POST", "/t/logged/anthropic/v1/messages", anthropicReq(true, prompt), hdr("X-Mock-Turn", `{"kind":"tool"}`)...))
	readAll(t, e.do(t, "POST", "/t/logged-c/openai/v1/chat/completions",
		`{"model":"gpt-4.1","stream":true,"messages":[{"role":"user","content":"`+prompt+`"}]}`,
		"Authorization", "Bearer "+vkA, "content-type", "application/json"))
	readAll(t, e.do(t, "POST", "/t/logged-r/openai/v1/responses", `{"model":"gpt-4.1","input":"`+prompt+`"}`,
		"Authorization", "Bearer "+vkA, "content-type", "application/json", "X-Request-Id", "agent-req-7"))
	readAll(t, e.do(t, "GET", "/anthropic/v1/models", "", "x-api-key", vkA))
	readAll(t, e.do(t, "POST", "/anthropic/v1/messages", anthropicReq(false, prompt), "x-api-key", "vk-wrong-"+vkA))
	waitFor(t, "the turns recorded", func() bool { return e.record(t, "logged").State == trajectory.WaitingTool })
	e.control(t, "logged", "interrupt", `{"message":"`+prompt+`"}`)
	readAll(t, e.do(t, "POST", "/t/logged/anthropic/v1/messages", anthropicReq(false, prompt), hdr()...))

	out := logs.String()
	for _, secret := range []string{vkA, vkB, antKey, oaiKey, adminToken, readToken, "0000-SECRET-PROMPT"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log holds %q", secret)
		}
	}
	// Every turn line names its request and trajectory.
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	turns, agentID := 0, false
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line is not JSON: %s", sc.Text())
		}
		if line["msg"] != "turn" {
			continue
		}
		turns++
		if line["request_id"] == nil || line["trajectory"] == nil {
			t.Errorf("turn line without ids: %s", sc.Text())
		}
		agentID = agentID || line["request_id"] == "agent-req-7"
	}
	if turns < 4 || !agentID {
		t.Errorf("%d turn lines; the agent's request id kept: %v\n%s", turns, agentID, out)
	}
	resp := e.do(t, "POST", "/t/logged/anthropic/v1/messages", anthropicReq(false, "x"), hdr()...)
	readAll(t, resp)
	if resp.Header.Get("X-Gatekeeper-Request-Id") == "" {
		t.Error("no X-Gatekeeper-Request-Id on the reply")
	}
}
