package request

import (
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/tidwall/gjson"

	"gatekeeper/streaming/internal/jsonscan"
)

// The digests of tool results, for the loop watchdog: xxhash64 like
// streaming.CallDigest, so that equal results digest equal on every
// replica.

// ContentDigest digests a tool result's content, the raw JSON value the
// request carries; empty content (absent, null, "" or []) is 0.
func ContentDigest(raw string) uint64 {
	switch strings.TrimSpace(raw) {
	case "", "null", `""`, "[]":
		return 0
	}
	if d := xxhash.Sum64String(raw); d != 0 {
		return d
	}
	return 1 // 0 is kept for no content
}

// The header lines that state a command's exit code in an OpenAI-API tool
// result (Codex CLI's shell output: "Exit code: 1" in the exec format,
// "Process exited with code 1" in the unified exec format), read before
// the "Output:" line that starts the command's own output.
var exitPrefixes = [...]string{"Exit code: ", "Process exited with code "}

// maxExitHeader bounds how far into a result its exit code is looked for.
const maxExitHeader = 2048

// StatesFailure reports whether a Chat or Responses tool result's content
// (the raw JSON value) states a non-zero exit code: its text is a JSON
// object whose exit_code or metadata.exit_code is a non-zero integer (the
// structured shell output), or one of its header lines, before any
// "Output:" line and within its first 2 KiB, reads "Exit code: N" or
// "Process exited with code N" with N ≠ 0. The text is the content when
// it is a string, else its first text part's text. OpenAI's APIs have no
// is_error flag: this is the only failure they show.
func StatesFailure(raw string) bool {
	lit := raw
	if len(raw) > 0 && raw[0] == '[' {
		it := jsonscan.NewArrayIter(raw)
		part, ok := it.Next()
		if !ok {
			return false
		}
		lit = jsonscan.MemberRaw(part, "text")
	}
	if !jsonscan.IsStringRaw(lit) {
		return false
	}
	head := lit[:min(len(lit), maxExitHeader)]
	object := strings.HasPrefix(lit, `"{`) && strings.Contains(lit, "exit_code")
	if !object && !strings.Contains(head, "xit code") && !strings.Contains(head, "exited with code") {
		return false // the common case: nothing to decode
	}
	text, _ := jsonscan.StringValue(lit)
	if object {
		for _, path := range [...]string{"exit_code", "metadata.exit_code"} {
			if v := gjson.Get(text, path); v.Type == gjson.Number {
				return v.Num != 0
			}
		}
		return false
	}
	text = text[:min(len(text), maxExitHeader)]
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "Output:" {
			return false
		}
		for _, p := range exitPrefixes {
			if rest, ok := strings.CutPrefix(line, p); ok {
				n, err := strconv.Atoi(strings.TrimSpace(rest))
				return err == nil && n != 0
			}
		}
	}
	return false
}
