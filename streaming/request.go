package streaming

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"slices"
	"strings"

	"github.com/tidwall/gjson"
)

// ToolResult is one tool result a request carries for a call of the previous reply.
type ToolResult struct {
	ID      string // tool_use_id (Anthropic), tool_call_id (Chat), call_id (Responses)
	Type    string // "tool_result", "tool", "function_call_output", "custom_tool_call_output"
	IsError bool   // Anthropic is_error
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
	typeToolResult           = "tool_result"
	typeChatTool             = "tool"
	typeFunctionCallOutput   = "function_call_output"
	typeCustomToolCallOutput = "custom_tool_call_output"
)

// billingPrefix starts the system block Claude Code rewrites on every
// request; a fingerprint that included it would change every turn.
const billingPrefix = "x-anthropic-billing-header"

// maxNesting bounds how deeply a body may nest. gjson validates
// recursively: a few megabytes of '[' would take seconds and a huge stack.
// encoding/json stops at the same depth.
const maxNesting = 10000

// fingerprintDomain separates this hash from any other SHA-256 of the same
// bytes, and versions the layout of what is hashed.
const fingerprintDomain = "gatekeeper conversation fingerprint v1"

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
	s := jsonView(body)
	m, depth, complete := readMembers(s)
	if !complete {
		depth = 0 // unknown: the walk stopped early
	}
	if err := checkObject(s, depth); err != nil {
		return nil, err
	}
	req := &Request{API: api, Stream: m.stream == "true"}
	if v, ok := stringValue(m.model); ok {
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
		req.IncludeUsage = isObject(m.streamOptions) &&
			gjson.Get(m.streamOptions, "include_usage").Type == gjson.True
		names = chatTools(names, m.tools, m.functions)
		req.ToolResults = chatResults(m.messages)
	case APIResponses:
		req.setMaxOutput("max_output_tokens", m.maxOutputTokens)
		names = responsesTools(names, m.tools)
		var results []ToolResult
		names, results = responsesInput(names, m.input)
		req.ToolResults = results
		if v, ok := stringValue(m.promptCacheKey); ok {
			req.SessionHint = strings.Clone(v)
		}
	}
	req.Tools = cloneStrings(names)
	req.Fingerprint = fingerprint(api, &m, req.Tools)
	return req, nil
}

// setMaxOutput records field as the output limit when raw is a JSON number.
func (r *Request) setMaxOutput(field, raw string) bool {
	if !isNumber(raw) {
		return false
	}
	r.MaxOutputTokens = gjson.Parse(raw).Int()
	r.MaxOutputField = field
	return true
}

// checkObject reports whether s is one valid JSON object, nested no deeper
// than maxNesting. depth is how deeply s nests when already known, else 0.
func checkObject(s string, depth int) error {
	i := skipSpace(s, 0)
	if i == len(s) || s[i] != '{' {
		return fmt.Errorf("%w: request body is not a JSON object", ErrInvalidJSON)
	}
	if depth > maxNesting || depth == 0 && !nestingWithin(s, maxNesting) {
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
	it := newObjectIter(s)
	for n := 0; n < len(s); n++ { // every member consumes input: len(s) bounds the count
		mem, ok := it.next()
		if !ok {
			break
		}
		k := mem.name()
		for _, f := range fields {
			if k == f.key {
				*f.dst = mem.val
				break
			}
		}
	}
	return m, it.depth + 1, it.closed && skipSpace(s, it.i) == len(s)
}

// Tools.

func anthropicTools(names []string, tools string) []string {
	it := newArrayIter(tools)
	for t, ok := it.next(); ok; t, ok = it.next() {
		o := readObject(t, "name", "type")
		names = appendName(names, o[0], o[1])
	}
	return names
}

func chatTools(names []string, tools, functions string) []string {
	it := newArrayIter(tools)
	for t, ok := it.next(); ok; t, ok = it.next() {
		o := readObject(t, "type", "function", "custom", "name")
		def := o[1] // type "function" and untyped entries
		if isString(o[0], "custom") {
			def = o[2]
		}
		names = appendName(names, memberRaw(def, "name"), o[3], o[0])
	}
	it = newArrayIter(functions)
	for f, ok := it.next(); ok; f, ok = it.next() {
		names = appendName(names, memberRaw(f, "name"))
	}
	return names
}

func responsesTools(names []string, tools string) []string {
	it := newArrayIter(tools)
	for t, ok := it.next(); ok; t, ok = it.next() {
		o := readObject(t, "type", "name", "tools")
		switch {
		case isString(o[0], "namespace"):
			// A namespace only groups functions; the model calls the inner names.
			inner := newArrayIter(o[2])
			for f, ok := inner.next(); ok; f, ok = inner.next() {
				fo := readObject(f, "name", "type")
				names = appendName(names, fo[0], fo[1])
			}
		case isString(o[0], "function"), isString(o[0], "custom"):
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
		if v, ok := stringValue(raw); ok && v != "" {
			return append(names, v)
		}
	}
	return names
}

// Tool results.

// pendingResult is a tool result whose id still points into the body.
type pendingResult struct {
	id    string
	typ   string
	isErr bool
}

func anthropicResults(messages string) []ToolResult {
	var buf [16]pendingResult
	tail := buf[:0]
	it := after(messages, isAssistantMessage)
	for msg, ok := it.next(); ok; msg, ok = it.next() {
		o := readObject(msg, "role", "content")
		if !isString(o[0], "user") {
			continue // Claude Code's mid-conversation role "system" messages
		}
		blocks := newArrayIter(o[1])
		for blk, ok := blocks.next(); ok; blk, ok = blocks.next() {
			b := readObject(blk, "type", "tool_use_id", "is_error")
			if isString(b[0], typeToolResult) {
				id, _ := stringValue(b[1])
				tail = append(tail, pendingResult{id: id, typ: typeToolResult, isErr: b[2] == "true"})
			}
		}
	}
	return copyResults(tail)
}

func chatResults(messages string) []ToolResult {
	var buf [16]pendingResult
	tail := buf[:0]
	it := after(messages, isAssistantMessage)
	for msg, ok := it.next(); ok; msg, ok = it.next() {
		// Legacy role "function" results carry no call id: skipped.
		if o := readObject(msg, "role", "tool_call_id"); isString(o[0], "tool") {
			id, _ := stringValue(o[1])
			tail = append(tail, pendingResult{id: id, typ: typeChatTool})
		}
	}
	return copyResults(tail)
}

// responsesInput reads the input items: the tools of code-mode
// additional_tools items, and the tool outputs after the last model output.
// With previous_response_id the input may hold outputs only; then all of
// them are the tail.
func responsesInput(names []string, input string) ([]string, []ToolResult) {
	it := newArrayIter(input)
	tail := it
	for item, ok := it.next(); ok; item, ok = it.next() {
		typ, _ := stringValue(memberRaw(item, "type"))
		switch {
		case typ == "additional_tools":
			names = responsesTools(names, memberRaw(item, "tools"))
		case isModelOutput(typ, item):
			tail = it
		}
	}
	var buf [16]pendingResult
	results := buf[:0]
	for item, ok := tail.next(); ok; item, ok = tail.next() {
		o := readObject(item, "type", "call_id")
		switch {
		case isString(o[0], typeFunctionCallOutput):
			id, _ := stringValue(o[1])
			results = append(results, pendingResult{id: id, typ: typeFunctionCallOutput})
		case isString(o[0], typeCustomToolCallOutput):
			id, _ := stringValue(o[1])
			results = append(results, pendingResult{id: id, typ: typeCustomToolCallOutput})
		}
	}
	return names, copyResults(results)
}

// after returns an iterator over the elements of arr that follow the last
// one isOutput accepts, or over all of them when none does. Finding the
// last output first means only the tail's elements are looked into.
func after(arr string, isOutput func(string) bool) arrayIter {
	it := newArrayIter(arr)
	tail := it
	for e, ok := it.next(); ok; e, ok = it.next() {
		if isOutput(e) {
			tail = it
		}
	}
	return tail
}

func isAssistantMessage(msg string) bool { return isString(memberRaw(msg, "role"), "assistant") }

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
		out[i] = ToolResult{ID: ids[i], Type: p.typ, IsError: p.isErr}
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
	if !isObject(metadata) {
		return ""
	}
	uid, ok := stringValue(memberRaw(metadata, "user_id"))
	if !ok || uid == "" {
		return ""
	}
	if checkObject(uid, 0) != nil {
		return strings.Clone(uid)
	}
	// A JSON user_id without a session names a user or a device, not a
	// session: grouping every session of that user would be wrong.
	sid, _ := stringValue(memberRaw(uid, "session_id"))
	return strings.Clone(sid)
}

// Fingerprint.

// fingerprint hashes the parts of a conversation that no later turn
// changes: api, system prompt, first user message and the declared tool
// set. Each field is a tag, a length and the decoded text, so that no two
// different field lists hash the same bytes.
func fingerprint(api API, m *members, tools []string) string {
	th := textHasher{h: sha256.New(), buf: make([]byte, 0, 512)}
	th.field('d', fingerprintDomain)
	th.field('a', string(api))
	th.texts('s', func(th *textHasher) { m.systemTexts(api, th) })
	th.texts('u', func(th *textHasher) { m.firstUserTexts(api, th) })
	// The tool set, not its order: a client may list the same tools
	// differently from one turn to the next.
	var buf [32]string
	sorted := append(buf[:0], tools...)
	slices.Sort(sorted)
	th.header('t', uint64(len(sorted)))
	for _, name := range sorted {
		th.field('n', name)
	}
	sum := th.h.Sum(th.buf[:0])
	var out [32]byte
	hex.Encode(out[:], sum[:16])
	return string(out[:])
}

// systemTexts feeds th the system prompt: Anthropic's system string or
// text blocks (without Claude Code's billing line), Responses instructions,
// and the text of the leading system/developer messages (Chat, Responses).
func (m *members) systemTexts(api API, th *textHasher) {
	switch api {
	case APIAnthropic:
		if isStringRaw(m.system) {
			th.text(m.system)
			return
		}
		it := newArrayIter(m.system)
		for blk, ok := it.next(); ok; blk, ok = it.next() {
			o := readObject(blk, "type", "text")
			if isString(o[0], "text") && !hasPrefixDecoded(o[1], billingPrefix) {
				th.text(o[1])
			}
		}
	case APIChat:
		it := newArrayIter(m.messages)
		for msg, ok := it.next(); ok; msg, ok = it.next() {
			o := readObject(msg, "role", "content")
			if !isString(o[0], "system") && !isString(o[0], "developer") {
				return
			}
			contentTexts(o[1], th)
		}
	case APIResponses:
		if isStringRaw(m.instructions) {
			th.text(m.instructions)
		}
		it := newArrayIter(m.input)
		for item, ok := it.next(); ok; item, ok = it.next() {
			o := readObject(item, "type", "role", "content")
			typ, _ := stringValue(o[0])
			if typ != "message" && typ != "" {
				if isModelOutput(typ, item) || strings.HasSuffix(typ, "_output") {
					return
				}
				continue // additional_tools and other items that are not messages
			}
			if !isString(o[1], "system") && !isString(o[1], "developer") {
				return
			}
			contentTexts(o[2], th)
		}
	}
}

// firstUserTexts feeds th the text of the conversation's first user
// message. With history held by the server (previous_response_id,
// conversation) the input starts at the latest turn, which changes every
// turn, so nothing is fed.
func (m *members) firstUserTexts(api API, th *textHasher) {
	switch api {
	case APIAnthropic, APIChat:
		it := newArrayIter(m.messages)
		for msg, ok := it.next(); ok; msg, ok = it.next() {
			o := readObject(msg, "role", "content")
			if isString(o[0], "user") {
				contentTexts(o[1], th)
				return
			}
		}
	case APIResponses:
		if isStringValue(m.previousResponseID) || isObject(m.conversation) || isStringValue(m.conversation) {
			return
		}
		if isStringRaw(m.input) {
			th.text(m.input)
			return
		}
		it := newArrayIter(m.input)
		for item, ok := it.next(); ok; item, ok = it.next() {
			o := readObject(item, "type", "role", "content")
			if (isString(o[0], "message") || o[0] == "") && isString(o[1], "user") {
				contentTexts(o[2], th)
				return
			}
		}
	}
}

// contentTexts feeds th a message content: a string, or the text of its
// text parts; images, documents and tool blocks are left out.
func contentTexts(content string, th *textHasher) {
	if isStringRaw(content) {
		th.text(content)
		return
	}
	it := newArrayIter(content)
	for part, ok := it.next(); ok; part, ok = it.next() {
		o := readObject(part, "type", "text")
		if isString(o[0], "text") || isString(o[0], "input_text") {
			th.text(o[1])
		}
	}
}

// textHasher writes length-prefixed fields into a hash. A text field is
// made of JSON string literals taken from the body; since its length must
// precede it, texts runs the feeding function twice: once counting the
// decoded bytes, once writing them.
type textHasher struct {
	h        hash.Hash
	buf      []byte // scratch for decoded text and headers; reused so writes don't allocate
	counting bool
	n        uint64
}

func (th *textHasher) header(tag byte, n uint64) {
	th.buf = binary.BigEndian.AppendUint64(append(th.buf[:0], tag), n)
	th.h.Write(th.buf)
}

func (th *textHasher) field(tag byte, s string) {
	th.header(tag, uint64(len(s)))
	for len(s) > 0 {
		n := min(len(s), cap(th.buf))
		th.buf = append(th.buf[:0], s[:n]...)
		th.h.Write(th.buf)
		s = s[n:]
	}
}

func (th *textHasher) texts(tag byte, feed func(*textHasher)) {
	th.counting, th.n = true, 0
	feed(th)
	th.counting = false
	th.header(tag, th.n)
	feed(th)
}

// text adds the decoded value of raw, a JSON string literal; anything else
// is ignored.
func (th *textHasher) text(raw string) {
	if !isStringRaw(raw) {
		return
	}
	s := raw[1 : len(raw)-1]
	for i := 0; i < len(s); {
		var d []byte
		d, i = unquoteInto(th.buf[:0], s, i)
		if len(d) == 0 {
			return // cannot happen with a non-empty scratch buffer; never loop forever
		}
		if th.counting {
			th.n += uint64(len(d))
		} else {
			th.h.Write(d)
		}
	}
}
