package wire

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"

	"gatekeeper/proxy/internal/coding"
)

// redactedKey replaces what an upstream error body shows of a provider key.
const redactedKey = "[redacted]"

// keyFragment is the shortest run of a key's bytes taken as a fragment of
// it wherever it appears; a key's last keyTail bytes count too at the end
// of a word, the way providers show "...abcd".
const (
	keyFragment = 8
	keyTail     = 4
)

// RedactKeys removes every fragment of the provider keys from an upstream
// error body, which otherwise reaches the agent as the provider wrote it
// (agents match its wording): any run of keyFragment or more bytes of a
// key, a word ending in a key's last keyTail bytes, and any word the
// provider masked with "***" (how keys are shown, e.g. "sk-pro****abcd").
// Replacements hold no quote or backslash, so a JSON body stays JSON.
func RedactKeys(body []byte, keys []string) []byte {
	cut := make([]bool, len(body))
	found := false
	mark := func(from, to int) {
		for i := from; i < to; i++ {
			cut[i] = true
		}
		found = true
	}
	for _, k := range keys {
		for i := 0; i+keyFragment <= len(k); i++ {
			w := k[i : i+keyFragment]
			for off := 0; ; {
				j := bytes.Index(body[off:], []byte(w))
				if j < 0 {
					break
				}
				mark(off+j, off+j+keyFragment)
				off += j + 1
			}
		}
	}
	// Words: maximal runs of bytes a key or its masked form is made of.
	for i := 0; i < len(body); {
		if !keyByte(body[i]) {
			i++
			continue
		}
		j := i
		for j < len(body) && keyByte(body[j]) {
			j++
		}
		k := j // a sentence's full stop is not part of the word
		for k > i && body[k-1] == '.' {
			k--
		}
		word := body[i:k]
		if bytes.Contains(word, []byte("***")) || bytes.Contains(word, []byte("\u2022\u2022\u2022")) || endsWithTail(word, keys) {
			mark(i, k)
		}
		i = j
	}
	if !found {
		return body
	}
	// A JSON escape sequence is cut whole or not at all, so that what
	// remains of a string is still a string.
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' {
			continue
		}
		end := min(i+2, len(body))
		if end < len(body) && body[i+1] == 'u' {
			end = min(i+6, len(body))
		}
		if slices.Contains(cut[i:end], true) {
			mark(i, end)
		}
		i = end - 1
	}
	out := make([]byte, 0, len(body))
	for i := 0; i < len(body); {
		if !cut[i] {
			out = append(out, body[i])
			i++
			continue
		}
		for i < len(body) && cut[i] {
			i++
		}
		out = append(out, redactedKey...)
	}
	return out
}

// keyByte reports whether c may be part of a key as providers write them,
// masked or not (bytes of a multibyte mask such as '•' included).
func keyByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c >= 0x80:
		return true
	}
	return c == '-' || c == '_' || c == '*' || c == '.'
}

func endsWithTail(word []byte, keys []string) bool {
	w := bytes.TrimRight(word, ".")
	for _, k := range keys {
		if len(k) >= 2*keyTail && len(w) >= keyTail && bytes.HasSuffix(w, []byte(k[len(k)-keyTail:])) {
			return true
		}
	}
	return false
}

// errUnreadableError: an upstream error body too large to check.
var errUnreadableError = errors.New("wire: upstream error body cannot be checked for key fragments")

// maxErrorBody bounds an upstream error body gatekeeper reads to redact.
const maxErrorBody = 1 << 20

// RedactErrorBody replaces an upstream error reply's body with its
// redacted form, decoded when it came compressed (coding.Decode). A body
// gatekeeper cannot read whole (too large once decoded, malformed, or in
// a coding it does not decode) is replaced by unreadable(status), a
// message of gatekeeper's own in the provider's format.
func RedactErrorBody(resp *http.Response, keys []string, unreadable func(status int) []byte) {
	var raw []byte
	err := coding.Decode(resp)
	if err == nil {
		raw, err = io.ReadAll(io.LimitReader(resp.Body, maxErrorBody+1))
	}
	_ = resp.Body.Close()
	if err == nil && len(raw) > maxErrorBody {
		err = errUnreadableError
	}
	if err != nil {
		raw = unreadable(resp.StatusCode)
		resp.Header.Set("Content-Type", "application/json")
	} else {
		raw = RedactKeys(raw, keys)
	}
	resp.Header.Del("Content-Encoding")
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	resp.ContentLength = int64(len(raw))
	resp.Header.Set("Content-Length", strconv.Itoa(len(raw)))
}
