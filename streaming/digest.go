package streaming

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/tidwall/gjson"
)

// Digests of tool calls and tool results, for the loop watchdog: equal
// calls and equal results must give equal digests on every replica, so
// the digest is xxhash64, never a per-process seeded hash. Zero is kept
// for "no content".

// CallDigest digests a tool call: its name and its input in canonical form
// (object keys sorted, whitespace removed, numbers as written, strings
// re-escaped one way), so that the same call written with its keys in
// another order or spaced differently digests the same. An input that is
// not one JSON value (a custom tool's free text) is digested as it is.
func CallDigest(name string, args []byte) uint64 {
	h := xxhash.New()
	_, _ = h.WriteString(name) // a hash's Write never fails
	if canon, ok := canonicalJSON(args); ok {
		_, _ = h.Write([]byte{0})
		_, _ = h.Write(canon)
	} else {
		_, _ = h.Write([]byte{1})
		_, _ = h.Write(args)
	}
	return nonZero(h.Sum64())
}

// canonicalJSON is b's single JSON value with object keys sorted and no
// whitespace; a member named twice keeps its last value, as the providers'
// decoders do. It fails for anything but one JSON value, and for values
// nested past encoding/json's limit.
func canonicalJSON(b []byte) ([]byte, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false // trailing data
	}
	out, err := json.Marshal(v) // map keys sorted; json.Number as written
	if err != nil {
		return nil, false
	}
	return out, true
}

// contentDigest digests a tool result's content, the raw JSON value the
// request carries; empty content (absent, null, "" or []) is 0.
func contentDigest(raw string) uint64 {
	switch strings.TrimSpace(raw) {
	case "", "null", `""`, "[]":
		return 0
	}
	return nonZero(xxhash.Sum64String(raw))
}

func nonZero(d uint64) uint64 {
	if d == 0 {
		return 1
	}
	return d
}

// The header lines that state a command's exit code in an OpenAI-API tool
// result (Codex CLI's shell output: "Exit code: 1" in the exec format,
// "Process exited with code 1" in the unified exec format), read before
// the "Output:" line that starts the command's own output.
var exitPrefixes = [...]string{"Exit code: ", "Process exited with code "}

// maxExitHeader bounds how far into a result its exit code is looked for.
const maxExitHeader = 2048

// statesFailure reports whether a Chat or Responses tool result's content
// (the raw JSON value) states a non-zero exit code: its text is a JSON
// object whose exit_code or metadata.exit_code is a non-zero integer (the
// structured shell output), or one of its header lines, before any
// "Output:" line and within its first 2 KiB, reads "Exit code: N" or
// "Process exited with code N" with N ≠ 0. The text is the content when
// it is a string, else its first text part's text. OpenAI's APIs have no
// is_error flag: this is the only failure they show.
func statesFailure(raw string) bool {
	lit := raw
	if len(raw) > 0 && raw[0] == '[' {
		it := newArrayIter(raw)
		part, ok := it.next()
		if !ok {
			return false
		}
		lit = memberRaw(part, "text")
	}
	if !isStringRaw(lit) {
		return false
	}
	head := lit[:min(len(lit), maxExitHeader)]
	object := strings.HasPrefix(lit, `"{`) && strings.Contains(lit, "exit_code")
	if !object && !strings.Contains(head, "xit code") && !strings.Contains(head, "exited with code") {
		return false // the common case: nothing to decode
	}
	text, _ := stringValue(lit)
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
