package gemini

import "strings"

// The routes of a Gemini turn: the model and whether the reply streams
// are in the path, POST /v1beta/models/{model}:generateContent and
// :streamGenerateContent (v1 alike), the latter read as SSE only with
// the query alt=sse.

// Methods of a turn.
const (
	MethodGenerate = "generateContent"
	MethodStream   = "streamGenerateContent"
)

// TurnPath reads rest, a request's canonical escaped path below the
// provider prefix: ok when it is a turn, with the model it names and
// whether its reply streams. A model outside [A-Za-z0-9._-] (an escape, a
// tuned model's path) is no turn gatekeeper knows, and is refused as the
// routes it does not know are.
func TurnPath(rest string) (model string, stream, ok bool) {
	m, found := strings.CutPrefix(rest, "/v1beta/models/")
	if !found {
		if m, found = strings.CutPrefix(rest, "/v1/models/"); !found {
			return "", false, false
		}
	}
	i := strings.LastIndexByte(m, ':')
	if i <= 0 || !plainModel(m[:i]) {
		return "", false, false
	}
	switch m[i+1:] {
	case MethodGenerate:
		return m[:i], false, true
	case MethodStream:
		return m[:i], true, true
	}
	return "", false, false
}

func plainModel(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return s != ""
}

// TurnRest is the path and query of a turn of model, the inverse of
// TurnPath: a streamed turn asks for SSE.
func TurnRest(model string, stream bool) (rest, query string) {
	if stream {
		return "/v1beta/models/" + model + ":" + MethodStream, "alt=sse"
	}
	return "/v1beta/models/" + model + ":" + MethodGenerate, ""
}
