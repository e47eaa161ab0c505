package responses

import "gatekeeper/streaming/internal/openai"

// ErrorBody is the OpenAI error body:
// {"error":{"message":msg,"type":typ,"code":typ,"param":null}}.
func (Dialect) ErrorBody(typ, msg string) []byte { return openai.ErrorBody(typ, msg) }
