package fixturetest

import (
	"encoding/json"
	"fmt"

	"gatekeeper/trajectory"
)

// providerUsage holds the usage fields of all three APIs; each API fills
// its own.
type providerUsage struct {
	// Anthropic Messages
	InputTokens              int64 `json:"input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	// OpenAI Responses
	InputTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	// OpenAI Chat Completions
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	TotalTokens         int64 `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

// Usage reads an EXPECTED.json usage object of api ("anthropic", "chat" or
// "responses") the way trajectory.Usage splits it: the three input fields
// add up to the prompt, and output includes reasoning.
func Usage(api string, raw json.RawMessage) (trajectory.Usage, error) {
	var p providerUsage
	if err := json.Unmarshal(raw, &p); err != nil {
		return trajectory.Usage{}, fmt.Errorf("usage: %w", err)
	}
	switch api {
	case "anthropic":
		return trajectory.Usage{InputTokens: p.InputTokens, CachedInputTokens: p.CacheReadInputTokens,
			CacheWriteTokens: p.CacheCreationInputTokens, OutputTokens: p.OutputTokens}, nil
	case "chat":
		out := p.CompletionTokens
		if r := p.CompletionTokensDetails.ReasoningTokens; r > 0 && p.TotalTokens == p.PromptTokens+p.CompletionTokens+r {
			out += r // xAI counts reasoning outside completion_tokens
		}
		cached := p.PromptTokensDetails.CachedTokens
		return trajectory.Usage{InputTokens: p.PromptTokens - cached, CachedInputTokens: cached, OutputTokens: out}, nil
	case "responses":
		cached := p.InputTokensDetails.CachedTokens
		return trajectory.Usage{InputTokens: p.InputTokens - cached, CachedInputTokens: cached, OutputTokens: p.OutputTokens}, nil
	}
	return trajectory.Usage{}, fmt.Errorf("no usage rules for api %q", api)
}
