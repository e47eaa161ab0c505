package meter

import (
	"encoding/json"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gatekeeper/internal/fixturetest"

	"gatekeeper/trajectory"
)

// fixtureUsage is the part of an EXPECTED.json entry this package prices.
type fixtureUsage struct {
	API   string          `json:"api"`
	Usage json.RawMessage `json:"usage"`
}

func loadFixtureUsage(t *testing.T) map[string]fixtureUsage {
	t.Helper()
	var m map[string]fixtureUsage
	fixturetest.Expected(t, &m)
	return m
}

func normalize(t *testing.T, api string, raw json.RawMessage) trajectory.Usage {
	t.Helper()
	u, err := fixturetest.Usage(api, raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// handMicros is each priced fixture's charge worked out by hand from its
// usage, in micro-dollars before rounding: Anthropic fixtures at
// claude-sonnet-4-5 (3 / 0.30 / 3.75 / 15), OpenAI-style ones at gpt-4o
// (2.50 / 1.25 / 0 / 10), USD per million tokens, so tokens × price is µ$.
var handMicros = map[string]float64{
	"anthropic-cache-read-max-tokens.sse":                 11*3 + 1031*0.30 + 100*15,    // 1842.30
	"anthropic-cache-write-max-tokens.sse":                18*3 + 1031*3.75 + 100*15,    // 5420.25
	"anthropic-max-tokens.sse":                            27*3 + 15*15,                 // 306
	"anthropic-pause-turn-web-search.sse":                 404500*3 + 943*15,            // 1227645: $1.23
	"anthropic-redacted-thinking.sse":                     92*3 + 189*15,                // 3111
	"anthropic-server-tool-use-then-tool-use.sse":         1595*3 + 143*15,              // 6930
	"anthropic-thinking-signature.sse":                    43*3 + 282*15,                // 4359
	"anthropic-tool-use-input-json-delta.sse":             599*3 + 135*15,               // 3822
	"anthropic-tool-use-no-args.sse":                      565*3 + 48*15,                // 2415
	"azure-chat-prompt-filter-first-chunk.sse":            15*2.5 + 78*10,               // 817.50: reasoning inside completion
	"azure-responses-function-call.sse":                   45*2.5 + 24*10,               // 352.50
	"deepseek-chat-reasoning-usage-on-finish-chunk.sse":   17*2.5 + 47*10,               // 512.50
	"openai-chat-cached-tokens-length.sse":                140*2.5 + 1280*1.25 + 100*10, // 2950
	"openai-chat-finish-length-max-tokens-1.sse":          79*2.5 + 1*10,                // 207.50
	"openai-chat-n2-interleaved-tool-calls.sse":           85*2.5 + 43*10,               // 642.50
	"openai-chat-n3-multiple-choices.sse":                 79*2.5 + 42*10,               // 617.50
	"openai-chat-parallel-tool-calls-obfuscation.sse":     364*2.5 + 40*10,              // 1310
	"openai-chat-parallel-tool-calls-usage.sse":           149*2.5 + 60*10,              // 972.50
	"openai-chat-refusal-deltas.sse":                      79*2.5 + 11*10,               // 307.50
	"openai-chat-strict-tool-call.sse":                    48*2.5 + 19*10,               // 310
	"openai-chat-tool-call-single.sse":                    76*2.5 + 24*10,               // 430
	"openai-responses-cached-tokens.sse":                  125*2.5 + 1390*1.25 + 8*10,   // 2130
	"openai-responses-function-call.sse":                  75*2.5 + 23*10,               // 417.50
	"openai-responses-incomplete-max-output-tokens.sse":   0,                            // usage all zeros as recorded
	"openai-responses-reasoning-then-function-call.sse":   134*2.5 + 28*10,              // 615
	"openai-responses-tool-search-then-function-call.sse": 640*2.5 + 46*10,              // 2060: reasoning inside output
	"openrouter-chat-comments-inline-error.sse":           43*2.5 + 10*10,               // 207.50
	"xai-chat-tool-call-reasoning-usage.sse":              1*2.5 + 306*1.25 + 253*10,    // 2915: 227 reasoning added
}

func TestCostOfRecordedFixtures(t *testing.T) {
	fixtures := loadFixtureUsage(t)
	table, err := NewTable(map[string]Price{
		"claude-sonnet-4-5": {Input: 3, CachedInput: 0.30, CacheWrite: 3.75, Output: 15},
		"gpt-4o":            {Input: 2.50, CachedInput: 1.25, Output: 10},
	}, unk)
	if err != nil {
		t.Fatal(err)
	}
	var priced []string
	for _, name := range slices.Sorted(maps.Keys(fixtures)) {
		f := fixtures[name]
		if f.API != "anthropic" && f.API != "chat" && f.API != "responses" || string(f.Usage) == "null" || len(f.Usage) == 0 {
			continue
		}
		priced = append(priced, name)
		t.Run(name, func(t *testing.T) {
			want, ok := handMicros[name]
			if !ok {
				t.Fatalf("no hand computation for %s", name)
			}
			model := "gpt-4o-2024-08-06"
			if f.API == "anthropic" {
				model = "claude-sonnet-4-5-20250929"
			}
			u := normalize(t, f.API, f.Usage)
			c := table.Cost(model, u)
			if !c.Priced {
				t.Fatalf("Cost(%q) used the fallback", model)
			}
			if got, want := c.Micros, int64(math.Floor(want+0.5)); got != want {
				t.Errorf("Cost(%q, %+v) = %d µ$, want %d µ$", model, u, got, want)
			}
			if got, want := math.Round(c.Dollars()*100), math.Round(want/1e4); got != want {
				t.Errorf("charge %.6f USD is %v cents, hand computation %v cents", c.Dollars(), got, want)
			}
		})
	}
	if len(priced) != len(handMicros) {
		t.Errorf("priced %d fixtures, hand computations for %d: %v", len(priced), len(handMicros), priced)
	}
}

var fixtureModel = regexp.MustCompile(`"model"\s*:\s*"([^"]*)"`)

// TestDefaultTableKnowsRecordedModels: every Anthropic and OpenAI model seen
// in the recorded streams has a price of its own, dated ids included.
func TestDefaultTableKnowsRecordedModels(t *testing.T) {
	fixtures := loadFixtureUsage(t)
	table := DefaultTable()
	for _, name := range slices.Sorted(maps.Keys(fixtures)) {
		if !strings.HasPrefix(name, "anthropic-") && !strings.HasPrefix(name, "openai-") && !strings.HasPrefix(name, "azure-") {
			continue
		}
		b := fixturetest.Read(t, name)
		m := fixtureModel.FindSubmatch(b)
		if m == nil || len(m[1]) == 0 {
			continue // Azure's filter chunk names no model
		}
		model := string(m[1])
		t.Run(name, func(t *testing.T) {
			if _, ok := table.Lookup(model); !ok {
				t.Errorf("default table has no price for %q", model)
			}
		})
	}
}

// TestDefaultTableLongPromptFixture: the recorded web-search turn of Claude
// Sonnet 4.5 had 404,500 input tokens, past its 200K long-context line.
func TestDefaultTableLongPromptFixture(t *testing.T) {
	fixtures := loadFixtureUsage(t)
	f, ok := fixtures["anthropic-pause-turn-web-search.sse"]
	if !ok {
		t.Skip("fixture not recorded")
	}
	c := DefaultTable().Cost("claude-sonnet-4-5-20250929", normalize(t, f.API, f.Usage))
	// 404500 × 6 + 943 × 22.50 = 2427000 + 21217.5
	if !c.LongPrompt || c.Micros != 2448218 {
		t.Errorf("Cost = %+v, want 2448218 µ$ at the long-prompt rates", c)
	}
}
