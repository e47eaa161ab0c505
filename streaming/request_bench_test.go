package streaming_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"gatekeeper/streaming"
)

// ccBlock and ccMessage keep the member order Claude Code sends (role and
// type first), which maps would sort away.
type ccBlock struct {
	Type         string `json:"type"`
	Text         string `json:"text,omitempty"`
	Thinking     string `json:"thinking,omitempty"`
	Signature    string `json:"signature,omitempty"`
	ID           string `json:"id,omitempty"`
	Name         string `json:"name,omitempty"`
	Input        any    `json:"input,omitempty"`
	ToolUseID    string `json:"tool_use_id,omitempty"`
	Content      string `json:"content,omitempty"`
	IsError      bool   `json:"is_error,omitempty"`
	CacheControl any    `json:"cache_control,omitempty"`
}

type ccMessage struct {
	Role    string    `json:"role"`
	Content []ccBlock `json:"content"`
}

// claudeCodeBody builds a request shaped like Claude Code's after turns
// tool round trips: a billing line and two cached system blocks, 24 tools
// with long descriptions and schemas, a metadata.user_id JSON string,
// thinking, and a history of thinking, tool_use and tool_result blocks
// full of escaped text. Each turn adds about 3.3 KB; 80 turns make ~300 KB.
func claudeCodeBody(turns int) []byte {
	type m = map[string]any
	para := "Use this tool when the task needs it. Paths must be absolute, e.g. \"/home/dev/project/main.go\".\n" +
		"\t- Never guess; read the file first.\n\t- Quote paths with spaces: \"my dir/a b.txt\".\n"
	type tool struct {
		Name        string `json:"name"`
		Description string `json:"description"`
		InputSchema any    `json:"input_schema"`
	}
	tools := make([]tool, 0, len(claudeCodeTools))
	for _, name := range claudeCodeTools {
		tools = append(tools, tool{name, strings.Repeat(para, 12), m{
			"type": "object", "additionalProperties": false, "required": []string{"file_path"},
			"properties": m{
				"file_path": m{"type": "string", "description": "The absolute path to the file"},
				"offset":    m{"type": "number", "description": "The line number to start reading from"},
				"mode":      m{"type": "string", "enum": []string{"a", "b", "c"}},
			},
			"$schema": "http://json-schema.org/draft-07/schema#",
		}})
	}
	system := strings.Repeat("You are an interactive CLI tool that helps users with software engineering tasks.\n"+
		"IMPORTANT: Keep responses short; use \"Task\" for searches.\n\n", 100)
	cache := m{"type": "ephemeral"}
	messages := []ccMessage{{Role: "user", Content: []ccBlock{
		{Type: "text", Text: "<system-reminder>\nContents of CLAUDE.md:\n- run \"go test ./...\"\n</system-reminder>"},
		{Type: "text", Text: "Fix the failing test in parser_test.go.", CacheControl: cache},
	}}}
	output := strings.Repeat("    12\tfunc (p *Parser) next() (Token, error) {\n    13\t\treturn p.lex.scan(\"\\n\")\n", 28)
	for i := range turns {
		id := fmt.Sprintf("toolu_01%022d", i)
		messages = append(messages,
			ccMessage{Role: "assistant", Content: []ccBlock{
				{Type: "thinking", Thinking: "I should look at the lexer next.\nIt may skip \"\\n\".", Signature: "EqQBCkYIBxgCKkDx3mJ0cW1v0bS=="},
				{Type: "text", Text: "Reading the next file."},
				{Type: "tool_use", ID: id, Name: "Read", Input: m{"file_path": "/home/dev/parser/lexer.go"}},
			}},
			ccMessage{Role: "user", Content: []ccBlock{
				{Type: "tool_result", ToolUseID: id, Content: output, IsError: i%7 == 3},
			}},
		)
	}
	body, err := json.Marshal(struct {
		Model     string      `json:"model"`
		Messages  []ccMessage `json:"messages"`
		System    []ccBlock   `json:"system"`
		Tools     []tool      `json:"tools"`
		Metadata  any         `json:"metadata"`
		MaxTokens int         `json:"max_tokens"`
		Thinking  any         `json:"thinking"`
		Stream    bool        `json:"stream"`
	}{
		Model:    "claude-sonnet-4-5-20250929",
		Messages: messages,
		System: []ccBlock{
			{Type: "text", Text: "x-anthropic-billing-header: cc_version=2.1.197.b41; cc_entrypoint=cli; cch=3f9a1;"},
			{Type: "text", Text: "You are Claude Code, Anthropic's official CLI for Claude.", CacheControl: cache},
			{Type: "text", Text: system, CacheControl: cache},
		},
		Tools:     tools,
		Metadata:  m{"user_id": `{"device_id":"5f0c6f1e9a7b","account_uuid":"","session_id":"8c1d3a52-6f0e-4b7a-9d21-3e5f7a9c0b14"}`},
		MaxTokens: 64000,
		Thinking:  m{"type": "adaptive"},
		Stream:    true,
	})
	if err != nil {
		panic(err)
	}
	return body
}

func BenchmarkParseRequest(b *testing.B) {
	for _, turns := range []int{8, 80, 800} {
		body := claudeCodeBody(turns)
		b.Run(fmt.Sprintf("claude-code-%dKB", len(body)>>10), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				req, err := dialects[streaming.APIAnthropic].ParseRequest(body)
				if err != nil || len(req.ToolResults) != 1 || len(req.Tools) != len(claudeCodeTools) {
					b.Fatalf("ParseRequest = %+v, %v", req, err)
				}
			}
		})
	}
}
