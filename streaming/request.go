package streaming

import (
	"fmt"
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming/internal/jsonscan"

	"gatekeeper/streaming/internal/callitems"
)

// ToolResult is one tool result a request carries for a call of the previous reply.
type ToolResult struct {
	ID   string // tool_use_id (Anthropic), tool_call_id (Chat), call_id (Responses)
	Type string // "tool_result", "tool", or the Responses output item type ("function_call_output", "shell_call_output"...)
	// IsError is Anthropic's is_error; for Chat and Responses, a content
	// that states a non-zero exit code (see statesFailure).
	IsError bool
	// Digest is xxhash64 of the content's raw JSON value (content,
	// output), 0 when it is empty: equal results digest equal.
	Digest uint64
}

// Request is what gatekeeper needs to know of one turn request.
type Request struct {
	API             API
	Model           string
	Stream          bool
	MaxOutputTokens int64  // 0 when the request sets none
	MaxOutputField  string // "max_tokens", "max_completion_tokens" or "max_output_tokens"; "" when none
	IncludeUsage    bool   // Chat: stream_options.include_usage is true
	// Tools are the names of the declared tools in order (hosted and server
	// tools: their name, else their type).
	Tools []string
	// ToolResults are the results after the last assistant output of the
	// conversation: the answers to the previous reply's calls.
	ToolResults []ToolResult
	// Fingerprint identifies the conversation: hex SHA-256 (first 16 bytes)
	// of its stable prefix (API, system prompt, first user message, tool set).
	Fingerprint string
	// SessionHint is the client's own session id when the body carries one:
	// Anthropic metadata.user_id (its session_id when it is a JSON object,
	// else the whole value), Responses prompt_cache_key. "" otherwise.
	SessionHint string
}

// Result types, kept as constants so that ToolResult.Type never points into
// a request body.
const (
	typeToolResult = "tool_result"
	typeChatTool   = "tool"
)

// maxNesting bounds how deeply a body may nest. gjson validates
// recursively: a few megabytes of '[' would take seconds and a huge stack.
// encoding/json stops at the same depth.
const maxNesting = 10000

// ParseRequest reads a turn request body of api. It fails with an error
// wrapping ErrInvalidJSON when body is not a JSON object, and ErrUnknownAPI
// for an unknown api. Members of the wrong JSON type are taken as absent.
//
// The body is neither unmarshalled nor copied, and the Request shares no
// memory with it: the caller may reuse body once ParseRequest returns.
func ParseRequest(api API, body []byte) (*Request, error) {
	switch api {
	case APIAnthropic, APIChat, APIResponses:
	default:
		return nil, fmt.Errorf("%w: %q", ErrUnknownAPI, string(api))
	}
	// A string view of the body lets every lookup below return substrings
	// of it instead of copies. Nothing derived from it outlives this call
	// without being copied first.
	s := jsonscan.View(body)
	m, depth, complete := readMembers(s)
	if !complete {
		depth = 0 // unknown: the walk stopped early
	}
	if err := checkObject(s, depth); err != nil {
		return nil, err
	}
	req := &Request{API: api, Stream: m.stream == "true"}
	if v, ok := jsonscan.StringValue(m.model); ok {
		req.Model = strings.Clone(v)
	}
	var refs [32]string // names and ids pointing into the body, copied out at the end
	names := refs[:0]
	switch api {
	case APIAnthropic:
		req.setMaxOutput("max_tokens", m.maxTokens)
		names = anthropicTools(names, m.tools)
		req.ToolResults = anthropicResults(m.messages)
		req.SessionHint = claudeSession(m.metadata)
	case APIChat:
		if !req.setMaxOutput("max_completion_tokens", m.maxCompletionTokens) {
			req.setMaxOutput("max_tokens", m.maxTokens)
		}
		req.IncludeUsage = jsonscan.IsObject(m.streamOptions) &&
			gjson.Get(m.streamOptions, "include_usage").Type == gjson.True
		names = chatTools(names, m.tools, m.functions)
		req.ToolResults = chatResults(m.messages)
	case APIResponses:
		req.setMaxOutput("max_output_tokens", m.maxOutputTokens)
		names = responsesTools(names, m.tools)
		var results []ToolResult
		names, results = responsesInput(names, m.input)
		req.ToolResults = results
		if v, ok := jsonscan.StringValue(m.promptCacheKey); ok {
			req.SessionHint = strings.Clone(v)
		}
	}
	req.Tools = cloneStrings(names)
	req.Fingerprint = fingerprint(api, &m, req.Tools)
	return req, nil
}

// setMaxOutput records field as the output limit when raw is a JSON number.
func (r *Request) setMaxOutput(field, raw string) bool {
	if !jsonscan.IsNumber(raw) {
		return false
	}
	r.MaxOutputTokens = gjson.Parse(raw).Int()
	r.MaxOutputField = field
	return true
}

// checkObject reports whether s is one valid JSON object, nested no deeper
// than maxNesting. depth is how deeply s nests when already known, else 0.
func checkObject(s string, depth int) error {
	i := jsonscan.SkipSpace(s, 0)
	if i == len(s) || s[i] != '{' {
		return fmt.Errorf("%w: request body is not a JSON object", ErrInvalidJSON)
	}
	if depth > maxNesting || depth == 0 && !jsonscan.NestingWithin(s, maxNesting) {
		return fmt.Errorf("%w: request body nests deeper than %d levels", ErrInvalidJSON, maxNesting)
	}
	if !gjson.Valid(s) {
		return fmt.Errorf("%w: request body", ErrInvalidJSON)
	}
	return nil
}

// members holds the raw JSON text of the top-level members ParseRequest
// reads, "" for those absent.
type members struct {
	model, stream                                   string
	maxTokens, maxCompletionTokens, maxOutputTokens string
	streamOptions, metadata, promptCacheKey         string
	tools, functions                                string
	system, instructions, messages, input           string
	previousResponseID, conversation                string
}

// readMembers walks the top level once. A member given twice takes its
// last value, as the providers' JSON decoders do: the limits gatekeeper
// enforces must be the ones the provider applies.
//
// It also returns how deeply the body nests and whether the walk reached
// the body's end; only then does the depth cover the whole body.
func readMembers(s string) (m members, depth int, complete bool) {
	fields := [...]struct {
		key string
		dst *string
	}{
		{"model", &m.model}, {"stream", &m.stream}, {"max_tokens", &m.maxTokens},
		{"max_completion_tokens", &m.maxCompletionTokens}, {"max_output_tokens", &m.maxOutputTokens},
		{"stream_options", &m.streamOptions}, {"metadata", &m.metadata}, {"prompt_cache_key", &m.promptCacheKey},
		{"tools", &m.tools}, {"functions", &m.functions}, {"system", &m.system}, {"instructions", &m.instructions},
		{"messages", &m.messages}, {"input", &m.input}, {"previous_response_id", &m.previousResponseID},
		{"conversation", &m.conversation},
	}
	it := jsonscan.NewObjectIter(s)
	for n := 0; n < len(s); n++ { // every member consumes input: len(s) bounds the count
		mem, ok := it.Next()
		if !ok {
			break
		}
		k := mem.Name()
		for _, f := range fields {
			if k == f.key {
				*f.dst = mem.Val
				break
			}
		}
	}
	return m, it.Depth + 1, it.Closed && jsonscan.SkipSpace(s, it.Offset()) == len(s)
}

// Tools.

func anthropicTools(names []string, tools string) []string {
	it := jsonscan.NewArrayIter(tools)
	for t, ok := it.Next(); ok; t, ok = it.Next() {
		o := jsonscan.ReadObject(t, "name", "type")
		names = appendName(names, o[0], o[1])
	}
	return names
}

func chatTools(names []string, tools, functions string) []string {
	it := jsonscan.NewArrayIter(tools)
	for t, ok := it.Next(); ok; t, ok = it.Next() {
		o := jsonscan.ReadObject(t, "type", "function", "custom", "name")
		def := o[1] // type "function" and untyped entries
		if jsonscan.IsString(o[0], "custom") {
			def = o[2]
		}
		names = appendName(names, jsonscan.MemberRaw(def, "name"), o[3], o[0])
	}
	it = jsonscan.NewArrayIter(functions)
	for f, ok := it.Next(); ok; f, ok = it.Next() {
		names = appendName(names, jsonscan.MemberRaw(f, "name"))
	}
	return names
}

func responsesTools(names []string, tools string) []string {
	it := jsonscan.NewArrayIter(tools)
	for t, ok := it.Next(); ok; t, ok = it.Next() {
		o := jsonscan.ReadObject(t, "type", "name", "tools")
		switch {
		case jsonscan.IsString(o[0], "namespace"):
			// A namespace only groups functions; the model calls the inner names.
			inner := jsonscan.NewArrayIter(o[2])
			for f, ok := inner.Next(); ok; f, ok = inner.Next() {
				fo := jsonscan.ReadObject(f, "name", "type")
				names = appendName(names, fo[0], fo[1])
			}
		case jsonscan.IsString(o[0], "function"), jsonscan.IsString(o[0], "custom"):
			names = appendName(names, o[1])
		default: // hosted tools (web_search, file_search, mcp, ...) are known by type
			names = appendName(names, o[0])
		}
	}
	return names
}

// appendName appends the first of raws that is a non-empty JSON string.
func appendName(names []string, raws ...string) []string {
	for _, raw := range raws {
		if v, ok := jsonscan.StringValue(raw); ok && v != "" {
			return append(names, v)
		}
	}
	return names
}

// Tool results.

// pendingResult is a tool result whose id still points into the body.
type pendingResult struct {
	id       string
	typ      string
	isErr    bool
	digest   uint64
	copyType bool // typ views the body
}

func anthropicResults(messages string) []ToolResult {
	var buf [16]pendingResult
	tail := buf[:0]
	it := after(messages, isAssistantMessage)
	for msg, ok := it.Next(); ok; msg, ok = it.Next() {
		o := jsonscan.ReadObject(msg, "role", "content")
		if !jsonscan.IsString(o[0], "user") {
			continue // Claude Code's mid-conversation role "system" messages
		}
		blocks := jsonscan.NewArrayIter(o[1])
		for blk, ok := blocks.Next(); ok; blk, ok = blocks.Next() {
			b := jsonscan.ReadObject(blk, "type", "tool_use_id", "is_error", "content")
			if jsonscan.IsString(b[0], typeToolResult) {
				id, _ := jsonscan.StringValue(b[1])
				tail = append(tail, pendingResult{id: id, typ: typeToolResult, isErr: b[2] == "true", digest: contentDigest(b[3])})
			}
		}
	}
	return copyResults(tail)
}

func chatResults(messages string) []ToolResult {
	var buf [16]pendingResult
	tail := buf[:0]
	it := after(messages, isAssistantMessage)
	for msg, ok := it.Next(); ok; msg, ok = it.Next() {
		// Legacy role "function" results carry no call id: skipped.
		if o := jsonscan.ReadObject(msg, "role", "tool_call_id", "content"); jsonscan.IsString(o[0], "tool") {
			id, _ := jsonscan.StringValue(o[1])
			tail = append(tail, pendingResult{id: id, typ: typeChatTool, isErr: statesFailure(o[2]), digest: contentDigest(o[2])})
		}
	}
	return copyResults(tail)
}

// responsesInput reads the input items: the tools of code-mode
// additional_tools items, and the tool outputs after the last model output.
// With previous_response_id the input may hold outputs only; then all of
// them are the tail.
func responsesInput(names []string, input string) ([]string, []ToolResult) {
	it := jsonscan.NewArrayIter(input)
	tail := it
	for item, ok := it.Next(); ok; item, ok = it.Next() {
		typ, _ := jsonscan.StringValue(jsonscan.MemberRaw(item, "type"))
		switch {
		case typ == "additional_tools":
			names = responsesTools(names, jsonscan.MemberRaw(item, "tools"))
		case isModelOutput(typ, item):
			tail = it
		}
	}
	var buf [16]pendingResult
	results := buf[:0]
	for item, ok := tail.Next(); ok; item, ok = tail.Next() {
		o := jsonscan.ReadObject(item, "type", "call_id", "id", "output")
		typ, _ := jsonscan.StringValue(o[0])
		ci, ok := callitems.Output(typ)
		if !ok {
			continue
		}
		raw := o[1]
		if ci.OutputID == "id" {
			raw = o[2]
		}
		id, _ := jsonscan.StringValue(raw)
		// A known type keeps the table's string; copyResults copies the rest.
		results = append(results, pendingResult{id: id, typ: ci.Output, copyType: ci.Unknown,
			isErr: statesFailure(o[3]), digest: contentDigest(o[3])})
	}
	return names, copyResults(results)
}

// after returns an iterator over the elements of arr that follow the last
// one isOutput accepts, or over all of them when none does. Finding the
// last output first means only the tail's elements are looked into.
func after(arr string, isOutput func(string) bool) jsonscan.ArrayIter {
	it := jsonscan.NewArrayIter(arr)
	tail := it
	for e, ok := it.Next(); ok; e, ok = it.Next() {
		if isOutput(e) {
			tail = it
		}
	}
	return tail
}

func isAssistantMessage(msg string) bool {
	return jsonscan.IsString(jsonscan.MemberRaw(msg, "role"), "assistant")
}

// isModelOutput reports whether a Responses input item of type typ
// replays something the model produced.
func isModelOutput(typ, item string) bool {
	switch {
	case typ == "reasoning", typ == "mcp_list_tools", typ == "mcp_approval_request":
		return true
	case strings.HasSuffix(typ, "_call"): // function_call, custom_tool_call, web_search_call, shell_call...
		return true
	case typ == "message", typ == "":
		return isAssistantMessage(item)
	}
	return false
}

func copyResults(tail []pendingResult) []ToolResult {
	if len(tail) == 0 {
		return nil
	}
	var buf [16]string
	ids := buf[:0]
	for _, p := range tail {
		ids = append(ids, p.id)
	}
	ids = cloneStrings(ids)
	out := make([]ToolResult, len(tail))
	for i, p := range tail {
		typ := p.typ
		if p.copyType {
			typ = strings.Clone(typ)
		}
		out[i] = ToolResult{ID: ids[i], Type: typ, IsError: p.isErr, Digest: p.digest}
	}
	return out
}

// cloneStrings copies strs into one new allocation, so that none of them
// points into the body any more.
func cloneStrings(strs []string) []string {
	if len(strs) == 0 {
		return nil
	}
	n := 0
	for _, s := range strs {
		n += len(s)
	}
	var b strings.Builder
	b.Grow(n)
	for _, s := range strs {
		b.WriteString(s)
	}
	all := b.String()
	out := make([]string, len(strs))
	off := 0
	for i, s := range strs {
		out[i] = all[off : off+len(s)]
		off += len(s)
	}
	return out
}

// claudeSession reads Claude Code's session id out of metadata.user_id, a
// string that holds a JSON object; other clients put an opaque id there.
func claudeSession(metadata string) string {
	if !jsonscan.IsObject(metadata) {
		return ""
	}
	uid, ok := jsonscan.StringValue(jsonscan.MemberRaw(metadata, "user_id"))
	if !ok || uid == "" {
		return ""
	}
	if checkObject(uid, 0) != nil {
		return strings.Clone(uid)
	}
	// A JSON user_id without a session names a user or a device, not a
	// session: grouping every session of that user would be wrong.
	sid, _ := jsonscan.StringValue(jsonscan.MemberRaw(uid, "session_id"))
	return strings.Clone(sid)
}
