package anthropic

import "encoding/json"

// ErrorBody is {"type":"error","error":{"type":typ,"message":msg}}.
func (Dialect) ErrorBody(typ, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}}) // maps of strings always marshal
	return b
}
