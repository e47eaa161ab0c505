package mockprovider

import (
	"cmp"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

func (s *Server) requestID(fam family) string {
	s.randMu.Lock()
	defer s.randMu.Unlock()
	if fam == familyAnthropic {
		return "req_011C" + base62(s.rnd, 20)
	}
	return "req_" + hexString(s.rnd, 32)
}

// exchange is one request being answered.
type exchange struct {
	s         *Server
	w         *statusWriter
	r         *http.Request
	rec       *RecordedRequest
	fam       family
	requestID string
	body      []byte
	served    int64     // requests in the current rate-limit window
	window    time.Time // its start
	enc       encoder   // the turn's Encoding, once chosen
	gemini    geminiTurn
}

// headers sets what every reply of the provider carries, errors included.
func (x *exchange) headers() {
	h := x.w.Header()
	limit := strconv.FormatInt(x.s.rpm, 10)
	remaining := strconv.FormatInt(max(0, x.s.rpm-x.served), 10)
	tokensLeft := strconv.FormatInt(max(0, x.s.tpm-tokens(len(x.body))), 10)
	if x.fam == familyGemini {
		return // Google sends no rate-limit headers
	}
	if x.fam == familyAnthropic {
		reset := x.window.Add(time.Minute).UTC().Format(time.RFC3339)
		h.Set("request-id", x.requestID)
		h.Set("anthropic-ratelimit-requests-limit", limit)
		h.Set("anthropic-ratelimit-requests-remaining", remaining)
		h.Set("anthropic-ratelimit-requests-reset", reset)
		h.Set("anthropic-ratelimit-tokens-limit", strconv.FormatInt(x.s.tpm, 10))
		h.Set("anthropic-ratelimit-tokens-remaining", tokensLeft)
		h.Set("anthropic-ratelimit-tokens-reset", reset)
		return
	}
	h.Set("x-request-id", x.requestID)
	h.Set("openai-version", "2020-10-01")
	h.Set("openai-processing-ms", "42")
	h.Set("x-ratelimit-limit-requests", limit)
	h.Set("x-ratelimit-remaining-requests", remaining)
	h.Set("x-ratelimit-reset-requests", x.window.Add(time.Minute).Sub(x.s.clock()).Round(time.Millisecond).String())
	h.Set("x-ratelimit-limit-tokens", strconv.FormatInt(x.s.tpm, 10))
	h.Set("x-ratelimit-remaining-tokens", tokensLeft)
	h.Set("x-ratelimit-reset-tokens", "0s")
}

// fail answers with an error body in the route's dialect.
func (x *exchange) fail(status int, typ, msg string, param any) {
	x.failAfter(status, typ, msg, param, 0)
}

func (x *exchange) failAfter(status int, typ, msg string, param any, retryAfter time.Duration) {
	h := x.w.Header()
	if retryAfter > 0 {
		h.Set("retry-after", strconv.FormatInt(int64((retryAfter+time.Second-1)/time.Second), 10))
	}
	var body obj
	switch x.fam {
	case familyGemini:
		body = geminiError(status, typ, msg)
	case familyAnthropic:
		if status == 429 || status >= 500 {
			h.Set("x-should-retry", "true")
		}
		body = anthropicError(typ, msg, x.requestID)
	default:
		body = openAIError(typ, msg, param, openAICode(status))
	}
	x.writeJSON(status, appendJSON(nil, body))
}

// authenticate checks the provider's auth header and records the key.
func (x *exchange) authenticate() bool {
	key := ""
	switch x.fam {
	case familyAnthropic:
		key = x.r.Header.Get("x-api-key")
	case familyGemini:
		key = cmp.Or(x.r.Header.Get("x-goog-api-key"), x.r.URL.Query().Get("key"))
	}
	if key == "" {
		if v, ok := strings.CutPrefix(x.r.Header.Get("Authorization"), "Bearer "); ok {
			key = strings.TrimSpace(v)
		}
	}
	x.s.update(x.rec, func(rec *RecordedRequest) { rec.APIKey = key })
	if key == "" {
		switch x.fam {
		case familyGemini:
			x.fail(http.StatusForbidden, "PERMISSION_DENIED", "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.", nil)
		case familyAnthropic:
			x.fail(http.StatusUnauthorized, "authentication_error", "x-api-key header is required", nil)
		default:
			x.fail(http.StatusUnauthorized, "authentication_error",
				"You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).", nil)
		}
		return false
	}
	if len(x.s.keys) > 0 && !keyAllowed(x.s.keys, key) {
		_, msg := statusError(x.fam, http.StatusUnauthorized)
		if x.fam == familyGemini {
			x.fail(http.StatusBadRequest, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.", nil)
			return false
		}
		if x.fam == familyOpenAI {
			// OpenAI's own 401 shows the key's first and last characters.
			msg = "Incorrect API key provided: " + maskKey(key) + ". You can find your API key in your account settings."
		}
		x.fail(http.StatusUnauthorized, "authentication_error", msg, nil)
		return false
	}
	return true
}

// maskKey shows a key the way OpenAI's 401 does: its first 7 and last 4
// characters around asterisks.
func maskKey(key string) string {
	if len(key) <= 11 {
		return strings.Repeat("*", len(key))
	}
	return key[:7] + strings.Repeat("*", len(key)-11) + key[len(key)-4:]
}

func keyAllowed(keys []string, key string) bool {
	ok := 0
	for _, k := range keys {
		ok |= subtle.ConstantTimeCompare([]byte(k), []byte(key))
	}
	return ok == 1
}

// validJSON answers 400 unless the body is one JSON object.
func (x *exchange) validJSON() bool {
	if !gjson.ValidBytes(x.body) || !gjson.ParseBytes(x.body).IsObject() {
		msg := "We could not parse the JSON body of your request."
		if x.fam == familyGemini {
			x.fail(http.StatusBadRequest, "INVALID_ARGUMENT", "Invalid JSON payload received.", nil)
			return false
		}
		if x.fam == familyAnthropic {
			msg = "There was an error parsing the body: the request body is not a JSON object."
		}
		x.fail(http.StatusBadRequest, "invalid_request_error", msg, nil)
		return false
	}
	return true
}

// require answers 400 for the first missing field, in the API's wording.
func (x *exchange) require(api API, fields ...string) bool {
	for _, f := range fields {
		if gjson.GetBytes(x.body, f).Exists() {
			continue
		}
		switch {
		case api == APIGemini:
			x.fail(http.StatusBadRequest, "INVALID_ARGUMENT", "* GenerateContentRequest."+f+": contents is not specified", nil)
		case api == APIAnthropic:
			x.fail(http.StatusBadRequest, "invalid_request_error", f+": Field required", nil)
		case api == APIChat && f == "model":
			x.fail(http.StatusBadRequest, "invalid_request_error", "you must provide a model parameter", nil)
		default:
			x.fail(http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("Missing required parameter: '%s'.", f), f)
		}
		return false
	}
	return true
}

// turn answers a Messages, Chat Completions or Responses request.
func (x *exchange) turn(api API) {
	x.s.update(x.rec, func(rec *RecordedRequest) { rec.API = api })
	if !x.authenticate() || !x.validJSON() {
		return
	}
	switch api {
	case APIAnthropic:
		if !x.require(api, "model", "messages", "max_tokens") {
			return
		}
	case APIChat:
		if !x.require(api, "model", "messages") {
			return
		}
	case APIResponses:
		if !x.require(api, "model") {
			return
		}
	case APIGemini:
		if !x.require(api, "contents") {
			return
		}
	}
	req := parseTurnRequest(api, x.body)
	if api == APIGemini {
		req.model, req.stream = x.gemini.model, x.gemini.stream // the path says them
	}
	name, spec, err := x.s.chooseTurn(x.r.Header, req)
	x.s.update(x.rec, func(rec *RecordedRequest) {
		rec.Turn, rec.Model, rec.Stream = name, req.model, req.stream
	})
	if err != nil {
		x.fail(http.StatusBadRequest, "invalid_request_error", err.Error(), nil)
		return
	}
	x.enc = encoder{coding: spec.Encoding, fault: spec.EncodingFault}

	x.s.randMu.Lock()
	p := buildPlan(spec, req, x.s.rnd, x.s.clock())
	var events []event
	var body []byte
	switch {
	case p.fail == failHTTP:
	case req.stream:
		events = renderStream(p, x.s.rnd, x.requestID)
	default:
		body = renderBody(p)
	}
	x.s.randMu.Unlock()
	if !x.admitRate(p.usage) {
		return
	}

	ctx := x.r.Context()
	if p.firstByteDelay > 0 {
		if err := x.s.sleep(ctx, p.firstByteDelay); err != nil {
			x.s.update(x.rec, func(rec *RecordedRequest) { rec.Canceled = true })
			return
		}
	}
	switch {
	case p.fail == failHTTP:
		x.failAfter(p.status, p.errType, p.errMessage, nil, p.retryAfter)
	case req.stream:
		x.stream(p, events)
	case p.fail == failDisconnect:
		x.w.Header().Set("Content-Type", "application/json")
		x.w.WriteHeader(http.StatusOK)
		x.abort(body[:len(body)/2])
	default:
		x.writeJSON(http.StatusOK, body)
	}
}

// stream writes the events one by one, each flushed before the next wait,
// and records when each went out.
func (x *exchange) stream(p *plan, events []event) {
	ctx := x.r.Context()
	rc := http.NewResponseController(x.w)
	h := x.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	ew := x.enc.events(h, x.w)
	x.w.WriteHeader(http.StatusOK)
	canceled := func() { x.s.update(x.rec, func(rec *RecordedRequest) { rec.Canceled = true }) }
	for i, ev := range events {
		wait := time.Duration(0)
		if i > 0 {
			wait = p.eventDelay
		}
		if i == p.stallAt {
			wait += p.stall
		}
		if wait > 0 {
			if err := x.s.sleep(ctx, wait); err != nil {
				canceled()
				return
			}
		}
		if ctx.Err() != nil {
			canceled()
			return
		}
		// A FaultCut stream ends, cleanly, halfway through the
		// compressed bytes of its middle event.
		cut := ew.cut && i == len(events)/2
		if err := ew.write(ev.appendTo(nil), cut); err != nil {
			canceled()
			return
		}
		if err := rc.Flush(); err != nil {
			canceled()
			return
		}
		now := x.s.clock()
		x.s.update(x.rec, func(rec *RecordedRequest) { rec.EventTimes = append(rec.EventTimes, now) })
		if cut {
			return
		}
	}
	if p.fail == failDisconnect {
		x.abort(nil)
	}
	if err := ew.close(); err != nil {
		canceled()
	}
}

// abort writes partial bytes and cuts the connection the way a crashed
// upstream does: the HTTP server closes it without ending the body.
func (x *exchange) abort(partial []byte) {
	if len(partial) > 0 {
		_, _ = x.w.Write(partial) // the connection is cut next anyway
	}
	_ = http.NewResponseController(x.w).Flush()
	x.s.update(x.rec, func(rec *RecordedRequest) { rec.Aborted = true; rec.Status = http.StatusOK })
	panic(http.ErrAbortHandler)
}

// countTokens answers POST /v1/messages/count_tokens.
func (x *exchange) countTokens() {
	if !x.authenticate() || !x.validJSON() || !x.require(APIAnthropic, "model", "messages") {
		return
	}
	n := max(1, tokens(len(x.body)))
	x.writeJSON(http.StatusOK, appendJSON(nil, obj{{"input_tokens", n}}))
}

type modelInfo struct {
	id, name string
	created  time.Time
}

var anthropicModels = []modelInfo{
	{"claude-sonnet-4-5-20250929", "Claude Sonnet 4.5", time.Date(2025, 9, 29, 0, 0, 0, 0, time.UTC)},
	{"claude-haiku-4-5-20251001", "Claude Haiku 4.5", time.Date(2025, 10, 1, 0, 0, 0, 0, time.UTC)},
	{"claude-opus-4-1-20250805", "Claude Opus 4.1", time.Date(2025, 8, 5, 0, 0, 0, 0, time.UTC)},
}

var openAIModels = []modelInfo{
	{"gpt-5", "", time.Date(2025, 8, 5, 0, 0, 0, 0, time.UTC)},
	{"gpt-5-mini", "", time.Date(2025, 8, 5, 0, 0, 0, 0, time.UTC)},
	{"gpt-4o", "", time.Date(2024, 5, 10, 0, 0, 0, 0, time.UTC)},
}

// models answers GET /v1/models in the caller's dialect.
func (x *exchange) models() {
	if !x.authenticate() {
		return
	}
	var body obj
	if x.fam == familyAnthropic {
		data := make([]obj, 0, len(anthropicModels))
		for _, m := range anthropicModels {
			data = append(data, obj{{"type", "model"}, {"id", m.id}, {"display_name", m.name},
				{"created_at", m.created.Format(time.RFC3339)}})
		}
		body = obj{{"data", data}, {"has_more", false},
			{"first_id", anthropicModels[0].id}, {"last_id", anthropicModels[len(anthropicModels)-1].id}}
	} else {
		data := make([]obj, 0, len(openAIModels))
		for _, m := range openAIModels {
			data = append(data, obj{{"id", m.id}, {"object", "model"}, {"created", m.created.Unix()}, {"owned_by", "system"}})
		}
		body = obj{{"object", "list"}, {"data", data}}
	}
	x.writeJSON(http.StatusOK, appendJSON(nil, body))
}

func (x *exchange) notFound() {
	if x.fam == familyGemini {
		x.fail(http.StatusNotFound, "NOT_FOUND", "Requested entity was not found.", nil)
		return
	}
	if x.fam == familyAnthropic {
		x.fail(http.StatusNotFound, "not_found_error", "Not Found", nil)
		return
	}
	x.fail(http.StatusNotFound, "invalid_request_error",
		fmt.Sprintf("Invalid URL (%s %s)", x.r.Method, x.r.URL.Path), nil)
}
