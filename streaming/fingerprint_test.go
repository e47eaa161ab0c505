package streaming_test

import (
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/sjson"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/streaming"
)

func TestRequestFingerprint(t *testing.T) {
	turn1 := fixturetest.ReadFile(t, requestTestdata, "anthropic-claude-code-turn1.json")
	turn2 := fixturetest.ReadFile(t, requestTestdata, "anthropic-claude-code-turn2.json")
	chat := fixturetest.ReadFile(t, requestTestdata, "chat-openai-sdk-parallel-tools.json")
	codex := fixturetest.ReadFile(t, requestTestdata, "responses-codex-exec.json")
	codeMode := fixturetest.ReadFile(t, requestTestdata, "responses-codex-code-mode.json")
	prev := fixturetest.ReadFile(t, requestTestdata, "responses-previous-response-id.json")

	set := func(body []byte, path string, v any) []byte {
		t.Helper()
		out, err := sjson.SetBytes(body, path, v)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	setRaw := func(body []byte, path, raw string) []byte {
		t.Helper()
		out, err := sjson.SetRawBytes(body, path, []byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	del := func(body []byte, path string) []byte {
		t.Helper()
		out, err := sjson.DeleteBytes(body, path)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// A long text with escapes everywhere, so that decoding crosses the
	// hasher's scratch buffer boundaries; escaped differently it must still
	// hash the same.
	long := strings.Repeat("Line \"é\" and tab\t, emoji 😀 /path\\x\n", 200)
	var escaped strings.Builder
	escaped.WriteByte('"')
	for _, r := range long {
		if r > 0xFFFF {
			escaped.WriteString(`\ud83d\ude00`)
			continue
		}
		escaped.WriteString(`\u`)
		escaped.WriteString(hex.EncodeToString([]byte{byte(r >> 8), byte(r)}))
	}
	escaped.WriteByte('"')
	plain, err := json.Marshal(long)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name  string
		api   streaming.API
		a, b  []byte
		apiB  streaming.API // api of b when it differs
		equal bool
	}{
		{"claude code turns 1 and 2 (billing line, cache_control, appended messages)", streaming.APIAnthropic, turn1, turn2, "", true},
		{"billing line dropped", streaming.APIAnthropic, turn1, del(turn1, "system.0"), "", true},
		{"model version changed", streaming.APIAnthropic, turn1, set(turn1, "model", "claude-sonnet-4-5"), "", true},
		{"tools reordered", streaming.APIAnthropic, turn1, setRaw(del(turn1, "tools.0"), "tools.-1", `{"name":"Task","input_schema":{}}`), "", true},
		{"thinking and max_tokens changed", streaming.APIAnthropic, turn1, set(set(turn1, "max_tokens", 32000), "thinking.type", "enabled"), "", true},
		{"system string equals one text block", streaming.APIAnthropic,
			[]byte(`{"system":"Be brief.","messages":[{"role":"user","content":"hi"}]}`),
			[]byte(`{"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`),
			"", true},
		{"same text escaped differently", streaming.APIAnthropic,
			[]byte(`{"system":` + string(plain) + `}`), []byte(`{"system":` + escaped.String() + `}`), "", true},
		{"image in the first user message ignored", streaming.APIAnthropic, turn1,
			setRaw(turn1, "messages.0.content.-1", `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}}`), "", true},
		{"system prompt changed", streaming.APIAnthropic, turn2, set(turn2, "system.2.text", "You are a subagent that searches files."), "", false},
		{"system block added", streaming.APIAnthropic, turn2, setRaw(turn2, "system.-1", `{"type":"text","text":"extra"}`), "", false},
		{"first user message changed", streaming.APIAnthropic, turn2, set(turn2, "messages.0.content.1.text", "Explore parser.go and report."), "", false},
		{"later messages do not count", streaming.APIAnthropic, turn2, set(turn2, "messages.2.content.0.content", "other"), "", true},
		{"tool removed", streaming.APIAnthropic, turn2, del(turn2, "tools.5"), "", false},
		{"tool added", streaming.APIAnthropic, turn2, setRaw(turn2, "tools.-1", `{"name":"mcp__github__create_pr","input_schema":{}}`), "", false},
		{"same body, other api", streaming.APIAnthropic, turn1, turn1, streaming.APIChat, false},
		{"text moved from system to user", streaming.APIAnthropic,
			[]byte(`{"system":"ab","messages":[{"role":"user","content":"c"}]}`),
			[]byte(`{"system":"a","messages":[{"role":"user","content":"bc"}]}`), "", false},
		{"text moved into a tool name", streaming.APIAnthropic,
			[]byte(`{"system":"ab","tools":[{"name":"c"}]}`),
			[]byte(`{"system":"a","tools":[{"name":"bc"}]}`), "", false},
		{"chat turn appended", streaming.APIChat, chat,
			setRaw(setRaw(chat, "messages.-1", `{"role":"assistant","content":"Pack one."}`), "messages.-1", `{"role":"user","content":"thanks"}`), "", true},
		{"chat developer message changed", streaming.APIChat, chat, set(chat, "messages.1.content.0.text", "Prefer imperial units."), "", false},
		{"chat system message after the first user message does not count", streaming.APIChat, chat,
			setRaw(chat, "messages.-1", `{"role":"system","content":"Summarize now."}`), "", true},
		{"chat first user message changed", streaming.APIChat, chat, set(chat, "messages.2.content.2.text", "and a coat?"), "", false},
		{"codex turn appended", streaming.APIResponses, codex,
			setRaw(codex, "input.-1", `{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Tests pass."}]}`), "", true},
		{"codex instructions changed", streaming.APIResponses, codex, set(codex, "instructions", "You are a reviewer."), "", false},
		{"codex leading developer message changed", streaming.APIResponses, codex, set(codex, "input.0.content.0.text", "read-only"), "", false},
		{"codex first user message changed", streaming.APIResponses, codex, set(codex, "input.1.content.0.text", "# AGENTS.md for /srv"), "", false},
		{"code mode tool set changed", streaming.APIResponses, codeMode, set(codeMode, "input.0.tools.1.tools.0.name", "view_pdf"), "", false},
		{"code mode turn appended", streaming.APIResponses, codeMode,
			setRaw(codeMode, "input.-1", `{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Two files."}]}`), "", true},
		{"previous_response_id: new input is not the first user message", streaming.APIResponses, prev,
			setRaw(set(prev, "previous_response_id", "resp_other"), "input", `[{"role":"user","content":"and order 3?"}]`), "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			apiB := tc.api
			if tc.apiB != "" {
				apiB = tc.apiB
			}
			a, err := dialects[tc.api].ParseRequest(tc.a)
			if err != nil {
				t.Fatal(err)
			}
			b, err := dialects[apiB].ParseRequest(tc.b)
			if err != nil {
				t.Fatal(err)
			}
			if (a.Fingerprint == b.Fingerprint) != tc.equal {
				t.Errorf("fingerprints %s and %s: equal = %v, want %v", a.Fingerprint, b.Fingerprint, !tc.equal, tc.equal)
			}
		})
	}
}
