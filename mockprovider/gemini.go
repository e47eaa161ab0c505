package mockprovider

import (
	"math/rand/v2"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"
)

// The Gemini API: POST /v1beta/models/{model}:generateContent and
// :streamGenerateContent?alt=sse, :countTokens and GET /v1beta/models,
// keyed by x-goog-api-key (or the query's key). A stream is one whole
// GenerateContentResponse per event, CRLF-framed as Google frames it, the
// last with the finishReason and the final usageMetadata; a function call
// comes whole in one part, without an id, with a thoughtSignature; the
// finishReason is STOP with a call too.

// geminiRoute reads a Gemini path: the model and the method after it.
func geminiRoute(path string) (model, method string, ok bool) {
	rest, found := strings.CutPrefix(path, "/v1beta/models/")
	if !found {
		if rest, found = strings.CutPrefix(path, "/v1/models/"); !found {
			return "", "", false
		}
	}
	model, method, ok = strings.Cut(rest, ":")
	return model, method, ok && model != "" && !strings.Contains(model, "/")
}

// geminiRequest serves a Gemini route.
func (x *exchange) geminiRequest(path string) {
	if path == "/v1beta/models" || path == "/v1/models" {
		if x.r.Method == http.MethodGet {
			x.geminiModels()
			return
		}
	}
	model, method, ok := geminiRoute(path)
	switch {
	case !ok || x.r.Method != http.MethodPost:
		x.notFound()
	case method == "generateContent":
		x.gemini = geminiTurn{model: model}
		x.turn(APIGemini)
	case method == "streamGenerateContent":
		if x.r.URL.Query().Get("alt") != "sse" {
			// Without alt=sse the API streams one JSON array, which the
			// mock does not speak.
			x.fail(http.StatusBadRequest, "INVALID_ARGUMENT", "the mock streams with alt=sse only", nil)
			return
		}
		x.gemini = geminiTurn{model: model, stream: true}
		x.turn(APIGemini)
	case method == "countTokens":
		if !x.authenticate() || !x.validJSON() {
			return
		}
		x.writeJSON(http.StatusOK, appendJSON(nil, obj{{"totalTokens", max(1, tokens(len(x.body)))}}))
	default:
		x.notFound()
	}
}

// geminiTurn is what a Gemini turn's path says.
type geminiTurn struct {
	model  string
	stream bool
}

var geminiModels = []string{"gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite"}

func (x *exchange) geminiModels() {
	if !x.authenticate() {
		return
	}
	ms := make([]obj, 0, len(geminiModels))
	for _, m := range geminiModels {
		ms = append(ms, obj{{"name", "models/" + m}, {"version", "001"}, {"displayName", m},
			{"supportedGenerationMethods", []any{"generateContent", "countTokens"}}})
	}
	x.writeJSON(http.StatusOK, appendJSON(nil, obj{{"models", ms}}))
}

func (r *turnRequest) readGemini(root gjson.Result) {
	r.maxTokens = root.Get("generationConfig.maxOutputTokens").Int()
	contents := root.Get("contents").Array()
	role := func(c gjson.Result) string {
		if c.Get("parts.#.functionResponse").Array() != nil && len(c.Get("parts.#.functionResponse").Array()) > 0 {
			return "tool"
		}
		return orDefault(c.Get("role").String(), "user")
	}
	if c, ok := tailUser(contents, role); ok {
		var b strings.Builder
		for _, p := range c.Get("parts").Array() {
			if t := p.Get("text"); t.Exists() {
				if b.Len() > 0 {
					b.WriteByte('\n')
				}
				b.WriteString(t.String())
			}
		}
		r.lastUserText = b.String()
	}
	if n := len(contents); n > 0 {
		for _, p := range contents[n-1].Get("parts").Array() {
			if fr := p.Get("functionResponse"); fr.Exists() {
				if r.toolResults == 0 {
					r.firstResult = fr.Get("response").Raw
				}
				r.toolResults++
			}
		}
	}
	for _, t := range root.Get("tools").Array() {
		for _, d := range t.Get("functionDeclarations").Array() {
			if name := d.Get("name").String(); name != "" {
				schema := d.Get("parametersJsonSchema")
				if !schema.Exists() {
					schema = d.Get("parameters")
				}
				r.tools = append(r.tools, declaredTool{name: name, schema: schema})
			}
		}
	}
}

func (s stopReason) gemini() string {
	switch s {
	case stopMaxTokens:
		return "MAX_TOKENS"
	case stopRefusal:
		return "SAFETY"
	}
	return "STOP" // a reply that calls tools stops with STOP too
}

func geminiUsage(u usageCounts) obj {
	prompt := u.promptTotal()
	o := obj{{"promptTokenCount", prompt}, {"candidatesTokenCount", u.output - u.reasoning}}
	if u.cacheRead > 0 {
		o = o.set("cachedContentTokenCount", u.cacheRead)
	}
	if u.reasoning > 0 {
		o = o.set("thoughtsTokenCount", u.reasoning)
	}
	return o.set("totalTokenCount", prompt+u.output)
}

// geminiChunk is one GenerateContentResponse: its parts, finishReason and
// usage when given.
func geminiChunk(p *plan, parts []obj, finish string, usage obj) obj {
	cand := obj{{"content", obj{{"parts", parts}, {"role", "model"}}}}
	if finish != "" {
		cand = cand.set("finishReason", finish)
	}
	cand = cand.set("index", 0)
	c := obj{{"candidates", []obj{cand}}}
	if usage != nil {
		c = c.set("usageMetadata", usage)
	}
	return c.set("modelVersion", p.model).set("responseId", p.id)
}

// geminiParts are the parts of the whole reply: thoughts, text, calls.
func geminiCallPart(p *plan, c planCall) obj {
	args := gjson.Parse(c.args)
	var a any = compactRaw(c.args)
	if !args.IsObject() {
		a = obj{}
	}
	part := obj{{"functionCall", obj{{"name", c.name}, {"args", a}}}}
	if p.signature != "" {
		part = part.set("thoughtSignature", p.signature)
	}
	return part
}

// geminiStream renders a plan as streamGenerateContent's events: a chunk
// per thought and text delta, one per call, and a last chunk with the
// finishReason and the usage. Every chunk carries the usage so far, as
// Google's do.
func geminiStream(p *plan) []event {
	var events []event
	add := func(c obj, delta, trailer bool) {
		events = append(events, event{data: appendJSON(nil, c), delta: delta, trailer: trailer, crlf: true})
	}
	running := geminiUsage(usageCounts{input: p.usage.input, cacheRead: p.usage.cacheRead})
	for _, d := range p.thinkingDeltas {
		add(geminiChunk(p, []obj{{{"text", d}, {"thought", true}}}, "", running), true, false)
	}
	for _, d := range p.textDeltas {
		add(geminiChunk(p, []obj{{{"text", d}}}, "", running), true, false)
	}
	for _, c := range p.calls {
		if c.cut {
			continue // a Gemini call is whole or absent
		}
		add(geminiChunk(p, []obj{geminiCallPart(p, c)}, "", running), true, false)
	}
	add(geminiChunk(p, []obj{{{"text", ""}}}, p.stop.gemini(), geminiUsage(p.usage)), false, true)
	return events
}

// geminiResponse renders a plan as generateContent's body.
func geminiResponse(p *plan) obj {
	var parts []obj
	if p.thinking != "" {
		parts = append(parts, obj{{"text", p.thinking}, {"thought", true}})
	}
	if p.text != "" {
		parts = append(parts, obj{{"text", p.text}})
	}
	for _, c := range p.calls {
		if !c.cut {
			parts = append(parts, geminiCallPart(p, c))
		}
	}
	if parts == nil {
		parts = []obj{{{"text", ""}}}
	}
	return geminiChunk(p, parts, p.stop.gemini(), geminiUsage(p.usage))
}

// geminiError is Google's error body, the data of a stream's error
// event too.
func geminiError(status int, typ, msg string) obj {
	return obj{{"error", obj{{"code", status}, {"message", msg}, {"status", typ}}}}
}

// geminiStatus is the canonical status name and message Google sends
// with an HTTP status.
func geminiStatus(status int) (string, string) {
	switch status {
	case 400:
		return "INVALID_ARGUMENT", "Request contains an invalid argument."
	case 401:
		return "UNAUTHENTICATED", "Request had invalid authentication credentials."
	case 403:
		return "PERMISSION_DENIED", "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API."
	case 404:
		return "NOT_FOUND", "Requested entity was not found."
	case 429:
		return "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota)."
	case 503:
		return "UNAVAILABLE", "The model is overloaded. Please try again later."
	case 504:
		return "DEADLINE_EXCEEDED", "Deadline expired before operation could complete."
	}
	if status >= 500 {
		return "INTERNAL", "An internal error has occurred."
	}
	return "INVALID_ARGUMENT", "Request contains an invalid argument."
}

func geminiErrorEvent(p *plan) event {
	return event{data: appendJSON(nil, geminiError(503, p.errType, p.errMessage)), crlf: true}
}

// geminiResponseID is a responseId as Google's look.
func geminiResponseID(rnd *rand.Rand) string { return base62(rnd, 23) }
