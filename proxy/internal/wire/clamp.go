package wire

import (
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// minThinkingBudget is the smallest thinking budget the Anthropic API takes.
const minThinkingBudget = 1024

// ThinkingBelow keeps an Anthropic request's extended-thinking budget
// below its output limit, as the API requires (budget_tokens < max_tokens)
// once the limit was lowered: a budget at or above the limit becomes half
// of it, or thinking is turned off when half is below the API's minimum.
// Adaptive thinking has no budget to keep; the body is then returned as it
// came. changed says whether it was rewritten.
func ThinkingBelow(body []byte, limit int64) (out []byte, changed bool, err error) {
	if limit <= 0 {
		return body, false, nil
	}
	th := gjson.GetBytes(body, "thinking")
	if th.Get("type").String() != "enabled" {
		return body, false, nil
	}
	if b := th.Get("budget_tokens"); b.Exists() && b.Int() < limit {
		return body, false, nil
	}
	if half := limit / 2; half >= minThinkingBudget {
		out, err = sjson.SetBytes(body, "thinking.budget_tokens", half)
	} else {
		out, err = sjson.SetRawBytes(body, "thinking", []byte(`{"type":"disabled"}`))
	}
	if err != nil {
		return nil, false, err
	}
	return out, true, nil
}
