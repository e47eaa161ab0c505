package gemini

import (
	"strings"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/request"
)

// Reading a generateContent request: its output limit
// (generationConfig.maxOutputTokens), its tools by name, the
// functionResponse parts answering the previous reply, and what the
// conversation's fingerprint hashes. The model and whether the reply
// streams are not in the body but in the path (Route).
//
// The API's JSON accepts the proto field names in lowerCamelCase and in
// snake_case alike, so every member is read under both spellings, the
// last one given winning as the provider's decoder does.

// The top-level members ParseRequest reads, in keys' order.
var keys = request.Keys("contents", "systemInstruction", "system_instruction", "tools",
	"generationConfig", "generation_config")

const (
	keyContents = request.Stream + 1 + iota
	keySystem
	keySystemSnake
	keyTools
	keyGeneration
	keyGenerationSnake
	nKeys
)

// typeFunctionResponse is kept as a constant so that ToolResult.Type never
// points into a request body.
const typeFunctionResponse = "functionResponse"

// OutputField is where a request sets its output limit, below
// generationConfig.
const OutputField = "maxOutputTokens"

// ParseRequest reads a generateContent request body. It fails with an
// error wrapping streaming.ErrInvalidJSON when body is not a JSON object.
// Model and Stream stay unset: the proxy takes them from the path.
func (Dialect) ParseRequest(body []byte) (*streaming.Request, error) {
	var m [nKeys]string
	req, _, err := request.Read(streaming.APIGemini, body, keys, m[:])
	if err != nil {
		return nil, err
	}
	req.Model, req.Stream = "", false
	readLimit(req, m[keyGeneration], m[keyGenerationSnake])
	var refs [32]string
	names := refs[:0]
	it := jsonscan.NewArrayIter(m[keyTools])
	for t, ok := it.Next(); ok; t, ok = it.Next() {
		names = appendToolNames(names, t)
	}
	req.Tools = request.CloneStrings(names)
	req.ToolResults = toolResults(m[keyContents])
	req.Replied, req.FirstReply = firstReply(m[keyContents])
	system := lastOf(m[keySystem], m[keySystemSnake])
	req.Fingerprint = request.Fingerprint(streaming.APIGemini,
		func(th *request.Hasher) { partTexts(th, system) },
		func(th *request.Hasher) { firstUser(th, m[keyContents]) },
		req.Tools)
	return req, nil
}

// readLimit reads the output limit of the generation config, and where a
// limit set on the request's behalf goes: MaxOutputField is the path of
// the limit as the request spells the config and the limit
// ("generationConfig.maxOutputTokens", "generation_config.max_output_tokens"...),
// set for a snake_case config without a limit too, so that a limit added
// there does not make a second config in the other spelling. (A request
// naming both spellings is refused before it is shaped.)
func readLimit(req *streaming.Request, camel, snake string) {
	outer, gen, inner := "generationConfig", camel, OutputField
	if snake != "" {
		outer, gen, inner = "generation_config", snake, "max_output_tokens"
	}
	if !jsonscan.IsObject(gen) {
		return
	}
	for _, k := range [...]string{OutputField, "max_output_tokens"} {
		if raw := jsonscan.MemberRaw(gen, k); raw != "" && request.SetMaxOutput(req, outer+"."+k, raw) {
			return
		}
	}
	if snake != "" {
		req.MaxOutputField = outer + "." + inner
	}
}

// lastOf is the last of raws that is present.
func lastOf(raws ...string) string {
	out := ""
	for _, r := range raws {
		if r != "" {
			out = r
		}
	}
	return out
}

// declarations is the function declarations list of a tools entry.
func declarations(tool string) string {
	o := jsonscan.ReadObject(tool, "functionDeclarations", "function_declarations")
	return lastOf(o[0], o[1])
}

// appendToolNames appends the names a tools entry declares: each
// function declaration's name; for any other entry (googleSearch,
// codeExecution, urlContext...), the name of its member.
func appendToolNames(names []string, tool string) []string {
	if decls := declarations(tool); decls != "" {
		it := jsonscan.NewArrayIter(decls)
		for d, ok := it.Next(); ok; d, ok = it.Next() {
			names = request.AppendName(names, request.FirstName(jsonscan.MemberRaw(d, "name")))
		}
		return names
	}
	for m, next, ok := jsonscan.NextMember(tool, jsonscan.ObjectStart(tool)); ok; m, next, ok = jsonscan.NextMember(tool, next) {
		names = request.AppendName(names, m.Name())
	}
	return names
}

// isModel reports whether a content has role "model".
func isModel(content string) bool {
	return jsonscan.IsString(jsonscan.MemberRaw(content, "role"), "model")
}

// toolResults reads the functionResponse parts after the last model
// content. A response's id is the functionResponse's own id ("" when
// it sends none); it failed when its response object has an "error"
// member (how Gemini CLI reports a failed tool).
func toolResults(contents string) []streaming.ToolResult {
	var buf [16]request.Pending
	tail := buf[:0]
	it := request.After(contents, isModel)
	for c, ok := it.Next(); ok; c, ok = it.Next() {
		if isModel(c) {
			continue
		}
		parts := jsonscan.NewArrayIter(jsonscan.MemberRaw(c, "parts"))
		for p, ok := parts.Next(); ok; p, ok = parts.Next() {
			o := jsonscan.ReadObject(p, "functionResponse", "function_response")
			fr := lastOf(o[0], o[1])
			if !jsonscan.IsObject(fr) {
				continue
			}
			f := jsonscan.ReadObject(fr, "id", "response")
			id, _ := jsonscan.StringValue(f[0])
			failed := jsonscan.IsObject(f[1]) && jsonscan.MemberRaw(f[1], "error") != ""
			tail = append(tail, request.Pending{ID: id, Type: typeFunctionResponse, IsError: failed,
				Digest: request.ContentDigest(f[1])})
		}
	}
	return request.CopyResults(tail)
}

// partTexts feeds th the text parts of a content (a system instruction).
func partTexts(th *request.Hasher, content string) {
	parts := jsonscan.NewArrayIter(jsonscan.MemberRaw(content, "parts"))
	for p, ok := parts.Next(); ok; p, ok = parts.Next() {
		th.Text(jsonscan.MemberRaw(p, "text"))
	}
}

// firstUser feeds th the text of the first user content.
func firstUser(th *request.Hasher, contents string) {
	it := jsonscan.NewArrayIter(contents)
	for c, ok := it.Next(); ok; c, ok = it.Next() {
		if role := jsonscan.MemberRaw(c, "role"); role == "" || jsonscan.IsString(role, "user") {
			partTexts(th, c)
			return
		}
	}
}

// firstReply reads whether the contents replay a reply of the model's,
// and the mark of the first: its first function call's id when it has
// one, else its text.
func firstReply(contents string) (replied bool, mark string) {
	it := jsonscan.NewArrayIter(contents)
	for c, ok := it.Next(); ok; c, ok = it.Next() {
		if !isModel(c) {
			continue
		}
		var mk request.Marker
		calls := 0
		parts := jsonscan.NewArrayIter(jsonscan.MemberRaw(c, "parts"))
		for p, ok := parts.Next(); ok; p, ok = parts.Next() {
			o := jsonscan.ReadObject(p, "functionCall", "text", "thought", "thoughtSignature")
			if o[0] != "" {
				if calls++; calls == 1 {
					mk.Signature(o[3]) // the first call part's, as ReplyMark reads it
				}
				mk.Call(jsonscan.MemberRaw(o[0], "id"))
				continue
			}
			if o[2] != "true" {
				mk.Text(o[1])
			}
		}
		return true, strings.Clone(mk.Mark())
	}
	return false, ""
}
