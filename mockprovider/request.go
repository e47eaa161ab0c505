package mockprovider

import (
	"bytes"
	"strings"

	"github.com/tidwall/gjson"
)

// API is the wire format of a turn request.
type API string

// The APIs the mock answers.
const (
	APIAnthropic API = "anthropic" // POST /v1/messages
	APIChat      API = "chat"      // POST /v1/chat/completions
	APIResponses API = "responses" // POST /v1/responses
	APIGemini    API = "gemini"    // POST /v1beta/models/{model}:generateContent, :streamGenerateContent
)

// declaredTool is a tool the request offers the model.
type declaredTool struct {
	name   string
	schema gjson.Result // JSON Schema of the input, may not exist
}

// turnRequest is what the mock needs from a turn request body. It is read
// with gjson, without unmarshalling the (possibly huge) body.
type turnRequest struct {
	api    API
	body   []byte
	model  string
	stream bool

	// maxTokens is the request's output limit, 0 when absent.
	maxTokens int64

	// lastUserText is the text of the user message ending the
	// conversation (see tailUser); for Anthropic that may be the message
	// carrying tool results.
	lastUserText string
	// toolResults counts the tool results at the tail of the conversation;
	// firstResult is the text of the first of them.
	toolResults int
	firstResult string
	tools       []declaredTool

	// Chat and Responses stream options.
	includeUsage       bool
	includeObfuscation bool

	// Responses fields echoed in the response object.
	instructions       gjson.Result
	previousResponseID gjson.Result
	store              gjson.Result
	toolsRaw           gjson.Result
	temperature        gjson.Result
	topP               gjson.Result
	parallelToolCalls  gjson.Result
	metadata           gjson.Result
	promptCacheKey     gjson.Result
	safetyIdentifier   gjson.Result
}

func parseTurnRequest(api API, body []byte) *turnRequest {
	r := &turnRequest{api: api, body: body}
	root := gjson.ParseBytes(body)
	r.model = root.Get("model").String()
	r.stream = root.Get("stream").Bool()
	switch api {
	case APIAnthropic:
		r.maxTokens = root.Get("max_tokens").Int()
		r.readAnthropic(root)
	case APIChat:
		r.maxTokens = root.Get("max_completion_tokens").Int()
		if r.maxTokens == 0 {
			r.maxTokens = root.Get("max_tokens").Int()
		}
		r.includeUsage = root.Get("stream_options.include_usage").Bool()
		r.includeObfuscation = includeObfuscation(root)
		r.readChat(root)
	case APIResponses:
		r.maxTokens = root.Get("max_output_tokens").Int()
		r.includeObfuscation = includeObfuscation(root)
		r.instructions = root.Get("instructions")
		r.previousResponseID = root.Get("previous_response_id")
		r.store = root.Get("store")
		r.toolsRaw = root.Get("tools")
		r.temperature = root.Get("temperature")
		r.topP = root.Get("top_p")
		r.parallelToolCalls = root.Get("parallel_tool_calls")
		r.metadata = root.Get("metadata")
		r.promptCacheKey = root.Get("prompt_cache_key")
		r.safetyIdentifier = root.Get("safety_identifier")
		r.readResponses(root)
	case APIGemini:
		r.readGemini(root)
	}
	return r
}

// includeObfuscation follows the API: padding is on unless the client
// turns it off with stream_options.include_obfuscation=false.
func includeObfuscation(root gjson.Result) bool {
	v := root.Get("stream_options.include_obfuscation")
	return !v.Exists() || v.Bool()
}

func (r *turnRequest) readAnthropic(root gjson.Result) {
	msgs := root.Get("messages").Array()
	if m, ok := tailUser(msgs, func(m gjson.Result) string { return m.Get("role").String() }); ok {
		r.lastUserText = contentText(m.Get("content"), "text")
	}
	if n := len(msgs); n > 0 && msgs[n-1].Get("role").String() == "user" {
		for _, block := range msgs[n-1].Get("content").Array() {
			if block.Get("type").String() == "tool_result" {
				if r.toolResults == 0 {
					r.firstResult = contentText(block.Get("content"), "text")
				}
				r.toolResults++
			}
		}
	}
	for _, t := range root.Get("tools").Array() {
		if name := t.Get("name").String(); name != "" {
			r.tools = append(r.tools, declaredTool{name: name, schema: t.Get("input_schema")})
		}
	}
}

func (r *turnRequest) readChat(root gjson.Result) {
	msgs := root.Get("messages").Array()
	if m, ok := tailUser(msgs, func(m gjson.Result) string { return m.Get("role").String() }); ok {
		r.lastUserText = contentText(m.Get("content"), "text")
	}
	first := len(msgs)
	for first > 0 && msgs[first-1].Get("role").String() == "tool" {
		first--
	}
	if first < len(msgs) {
		r.toolResults = len(msgs) - first
		r.firstResult = contentText(msgs[first].Get("content"), "text")
	}
	for _, t := range root.Get("tools").Array() {
		if name := t.Get("function.name").String(); name != "" {
			r.tools = append(r.tools, declaredTool{name: name, schema: t.Get("function.parameters")})
		}
	}
}

func (r *turnRequest) readResponses(root gjson.Result) {
	input := root.Get("input")
	if input.Type == gjson.String {
		r.lastUserText = input.String()
	}
	items := input.Array()
	if input.Type == gjson.String {
		items = nil
	}
	role := func(it gjson.Result) string {
		if typ := it.Get("type").String(); typ != "" && typ != "message" {
			return typ // function_call_output, reasoning, ...: not a message
		}
		return it.Get("role").String()
	}
	if it, ok := tailUser(items, role); ok {
		r.lastUserText = contentText(it.Get("content"), "input_text")
	}
	first := len(items)
	for first > 0 {
		typ := items[first-1].Get("type").String()
		if !strings.HasSuffix(typ, "_call_output") { // function_call_output, shell_call_output...
			break
		}
		first--
	}
	if first < len(items) {
		r.toolResults = len(items) - first
		r.firstResult = contentText(items[first].Get("output"), "input_text")
	}
	for _, t := range root.Get("tools").Array() {
		if t.Get("type").String() != "function" {
			continue
		}
		if name := t.Get("name").String(); name != "" {
			r.tools = append(r.tools, declaredTool{name: name, schema: t.Get("parameters")})
		}
	}
}

// tailUser returns the user message that ends the conversation, looking
// past system and developer messages. A conversation that ends in tool
// results or an assistant turn has none: what the user wrote earlier was
// already answered, so its directive must not fire again and loop an agent.
func tailUser(msgs []gjson.Result, role func(gjson.Result) string) (gjson.Result, bool) {
	for i := len(msgs) - 1; i >= 0; i-- {
		switch role(msgs[i]) {
		case "user":
			return msgs[i], true
		case "system", "developer":
			continue
		}
		return gjson.Result{}, false
	}
	return gjson.Result{}, false
}

// contentText joins the text of a content field that is either a string or
// a list of parts; textType is the part type holding text ("text",
// "input_text"); "text" parts are accepted everywhere.
func contentText(content gjson.Result, textType string) string {
	if content.Type == gjson.String {
		return content.String()
	}
	var b strings.Builder
	for _, part := range content.Array() {
		typ := part.Get("type").String()
		if typ != textType && typ != "text" && typ != "output_text" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(part.Get("text").String())
	}
	return b.String()
}

// cachedPrefix is the number of body bytes before the last cache_control
// marker: the prefix Anthropic would serve from its prompt cache.
func cachedPrefix(body []byte) int {
	i := bytes.LastIndex(body, []byte(`"cache_control"`))
	if i < 0 {
		return 0
	}
	return i
}
