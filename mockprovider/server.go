package mockprovider

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"
)

// Options configure a Server. The zero value is usable.
type Options struct {
	// Script names turns and rules; nil gives the default behavior.
	Script *Script
	// Clock stamps records and replies; default time.Now.
	Clock func() time.Time
	// Logger gets one line per request; default discards.
	Logger *slog.Logger
	// Rand drives ids, fragment boundaries and padding; default a source
	// seeded at random. It is only used under the Server's lock.
	Rand *rand.Rand
	// Sleep waits d or until ctx is done (returning its error). It times
	// first_byte_delay and event_delay; tests replace it to release a
	// stream one event at a time. Default: a timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Keys, when not empty, are the only API keys accepted; any other key
	// gets 401 like a wrong key at the provider.
	Keys []string
	// MaxRecords bounds the requests kept for Requests, oldest dropped
	// first, so that a load test does not hold every body in memory.
	// 0 means DefaultMaxRecords.
	MaxRecords int
}

// DefaultMaxRecords is the number of requests a Server remembers unless
// Options.MaxRecords says otherwise.
const DefaultMaxRecords = 10000

// RecordedRequest is one request as the mock received and answered it.
type RecordedRequest struct {
	Method   string
	Path     string
	RawQuery string
	Header   http.Header
	Body     []byte
	// API is set for turn requests (messages, chat completions,
	// responses); empty for the other routes.
	API API
	// Turn is how the reply was chosen: the script or built-in turn name,
	// "header" (a spec in X-Mock-Turn), "rules[i]" (an inline rule spec),
	// "default" or "default_tool_results".
	Turn   string
	Model  string
	Stream bool
	// APIKey is the key the request carried (x-api-key or bearer token).
	APIKey string
	Status int
	// Canceled is set when the client went away before the reply was
	// complete.
	Canceled bool
	// Aborted is set when the mock cut the connection on purpose
	// (a disconnect turn).
	Aborted bool
	// EventTimes holds when each stream event was written and flushed.
	EventTimes []time.Time
	Started    time.Time
	Ended      time.Time
}

func (r *RecordedRequest) clone() RecordedRequest {
	c := *r
	c.Header = r.Header.Clone()
	c.Body = bytes.Clone(r.Body)
	c.EventTimes = slices.Clone(r.EventTimes)
	return c
}

// Server is the fake provider; it is an http.Handler.
type Server struct {
	script *Script
	clock  func() time.Time
	log    *slog.Logger
	sleep  func(ctx context.Context, d time.Duration) error
	keys   []string
	limit  int

	randMu sync.Mutex
	rnd    *rand.Rand

	mu      sync.Mutex
	records []*RecordedRequest
	// The rate-limit headers count requests in one-minute windows, like
	// the providers' request limits, so a long load test never reads
	// "0 remaining" from a mock that never throttles.
	window      time.Time
	windowCount int64
	inflight    int
	idle        chan struct{} // closed while no request is in flight
}

var _ http.Handler = (*Server)(nil)

// New returns a Server.
func New(opts Options) *Server {
	s := &Server{
		script: opts.Script,
		clock:  opts.Clock,
		log:    opts.Logger,
		sleep:  opts.Sleep,
		keys:   slices.Clone(opts.Keys),
		limit:  opts.MaxRecords,
		rnd:    opts.Rand,
		idle:   make(chan struct{}),
	}
	close(s.idle)
	if s.script == nil {
		s.script = &Script{}
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	if s.limit <= 0 {
		s.limit = DefaultMaxRecords
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.sleep == nil {
		s.sleep = sleepTimer
	}
	if s.rnd == nil {
		s.rnd = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	return s
}

func sleepTimer(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Requests returns a copy of the requests received since New or Reset (the
// last Options.MaxRecords of them), in arrival order, including those
// still being answered.
func (s *Server) Requests() []RecordedRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]RecordedRequest, len(s.records))
	for i, r := range s.records {
		out[i] = r.clone()
	}
	return out
}

// Reset forgets the recorded requests and restarts the rate-limit counters.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records = nil
	s.window, s.windowCount = time.Time{}, 0
}

// WaitIdle returns once no request is being answered, or with ctx's error.
// Tests use it to read a record only after its handler has finished.
func (s *Server) WaitIdle(ctx context.Context) error {
	s.mu.Lock()
	idle := s.idle
	s.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// update changes a record under the lock, since Requests may be copying it.
func (s *Server) update(rec *RecordedRequest, f func(r *RecordedRequest)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(rec)
}

// maxBody bounds a request body; agent requests reach a few hundred KB.
const maxBody = 32 << 20

// ServeHTTP answers one request and records it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &RecordedRequest{
		Method:   r.Method,
		Path:     r.URL.Path,
		RawQuery: r.URL.RawQuery,
		Header:   r.Header.Clone(),
		Started:  s.clock(),
	}
	s.mu.Lock()
	s.records = append(s.records, rec)
	if len(s.records) > s.limit {
		s.records = slices.Delete(s.records, 0, len(s.records)-s.limit)
	}
	if rec.Started.Sub(s.window) >= time.Minute || rec.Started.Before(s.window) {
		s.window, s.windowCount = rec.Started, 0
	}
	s.windowCount++
	served, window := s.windowCount, s.window
	if s.inflight == 0 {
		s.idle = make(chan struct{})
	}
	s.inflight++
	s.mu.Unlock()
	rw := &statusWriter{ResponseWriter: w}
	defer func() {
		s.mu.Lock()
		rec.Ended = s.clock()
		if rec.Status == 0 {
			rec.Status = rw.status
		}
		s.inflight--
		if s.inflight == 0 {
			close(s.idle)
		}
		s.mu.Unlock()
		s.log.Info("mock request", "method", rec.Method, "path", rec.Path, "api", rec.API, "turn", rec.Turn,
			"status", rec.Status, "canceled", rec.Canceled, "aborted", rec.Aborted, "events", len(rec.EventTimes))
	}()

	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, maxBody))
	s.update(rec, func(rec *RecordedRequest) { rec.Body = body })
	x := &exchange{s: s, w: rw, r: r, rec: rec, served: served, window: window}
	x.fam = routeFamily(r)
	x.requestID = s.requestID(x.fam)
	x.headers()
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			x.fail(http.StatusRequestEntityTooLarge, "request_too_large", "Request exceeds the maximum allowed number of bytes.", nil)
			return
		}
		s.update(rec, func(rec *RecordedRequest) { rec.Canceled = true })
		return
	}
	x.body = body

	path := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case r.Method == http.MethodHead:
		rw.WriteHeader(http.StatusOK)
	case r.Method == http.MethodPost && path == "/v1/messages":
		x.turn(APIAnthropic)
	case r.Method == http.MethodPost && path == "/v1/chat/completions":
		x.turn(APIChat)
	case r.Method == http.MethodPost && path == "/v1/responses":
		x.turn(APIResponses)
	case r.Method == http.MethodPost && path == "/v1/messages/count_tokens":
		x.countTokens()
	case r.Method == http.MethodGet && path == "/v1/models":
		x.models()
	default:
		x.notFound()
	}
}

// statusWriter remembers the status; Unwrap lets http.ResponseController
// reach the real writer's Flush.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// routeFamily picks the dialect of a request: Anthropic for its paths or
// when the client speaks like an Anthropic SDK, OpenAI otherwise.
func routeFamily(r *http.Request) family {
	if strings.HasPrefix(r.URL.Path, "/v1/messages") {
		return familyAnthropic
	}
	if strings.HasPrefix(r.URL.Path, "/v1/chat/") || strings.HasPrefix(r.URL.Path, "/v1/responses") {
		return familyOpenAI
	}
	if r.Header.Get("anthropic-version") != "" || r.Header.Get("x-api-key") != "" {
		return familyAnthropic
	}
	return familyOpenAI
}

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
}

const (
	rateLimitRequests = 4000
	rateLimitTokens   = 2_000_000
)

// headers sets what every reply of the provider carries, errors included.
func (x *exchange) headers() {
	h := x.w.Header()
	remaining := strconv.FormatInt(max(0, rateLimitRequests-x.served), 10)
	tokensLeft := strconv.FormatInt(max(0, rateLimitTokens-tokens(len(x.body))), 10)
	if x.fam == familyAnthropic {
		reset := x.window.Add(time.Minute).UTC().Format(time.RFC3339)
		h.Set("request-id", x.requestID)
		h.Set("anthropic-ratelimit-requests-limit", strconv.Itoa(rateLimitRequests))
		h.Set("anthropic-ratelimit-requests-remaining", remaining)
		h.Set("anthropic-ratelimit-requests-reset", reset)
		h.Set("anthropic-ratelimit-tokens-limit", strconv.Itoa(rateLimitTokens))
		h.Set("anthropic-ratelimit-tokens-remaining", tokensLeft)
		h.Set("anthropic-ratelimit-tokens-reset", reset)
		return
	}
	h.Set("x-request-id", x.requestID)
	h.Set("openai-version", "2020-10-01")
	h.Set("openai-processing-ms", "42")
	h.Set("x-ratelimit-limit-requests", strconv.Itoa(rateLimitRequests))
	h.Set("x-ratelimit-remaining-requests", remaining)
	h.Set("x-ratelimit-reset-requests", x.window.Add(time.Minute).Sub(x.s.clock()).Round(time.Millisecond).String())
	h.Set("x-ratelimit-limit-tokens", strconv.Itoa(rateLimitTokens))
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
	if x.fam == familyAnthropic {
		if status == 429 || status >= 500 {
			h.Set("x-should-retry", "true")
		}
		body = anthropicError(typ, msg, x.requestID)
	} else {
		body = openAIError(typ, msg, param, openAICode(status))
	}
	x.writeJSON(status, appendJSON(nil, body))
}

// authenticate checks the provider's auth header and records the key.
func (x *exchange) authenticate() bool {
	key := ""
	if x.fam == familyAnthropic {
		key = x.r.Header.Get("x-api-key")
	}
	if key == "" {
		if v, ok := strings.CutPrefix(x.r.Header.Get("Authorization"), "Bearer "); ok {
			key = strings.TrimSpace(v)
		}
	}
	x.s.update(x.rec, func(rec *RecordedRequest) { rec.APIKey = key })
	if key == "" {
		if x.fam == familyAnthropic {
			x.fail(http.StatusUnauthorized, "authentication_error", "x-api-key header is required", nil)
		} else {
			x.fail(http.StatusUnauthorized, "authentication_error",
				"You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).", nil)
		}
		return false
	}
	if len(x.s.keys) > 0 && !keyAllowed(x.s.keys, key) {
		_, msg := statusError(x.fam, http.StatusUnauthorized)
		x.fail(http.StatusUnauthorized, "authentication_error", msg, nil)
		return false
	}
	return true
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

var directive = regexp.MustCompile(`mock:([A-Za-z0-9_-]+)`)

// chooseTurn applies the documented order: header, directive, rules,
// default.
func (s *Server) chooseTurn(h http.Header, req *turnRequest) (string, TurnSpec, error) {
	if v := strings.TrimSpace(h.Get(HeaderTurn)); v != "" {
		if strings.HasPrefix(v, "{") {
			spec, err := parseSpecJSON(v)
			return "header", spec, err
		}
		if spec, ok := s.namedTurn(v); ok {
			return v, spec, nil
		}
		return "", TurnSpec{}, &ScriptError{Field: HeaderTurn, Msg: fmt.Sprintf("no turn named %q", v)}
	}
	for _, m := range directive.FindAllStringSubmatch(req.lastUserText, -1) {
		if spec, ok := s.namedTurn(m[1]); ok {
			return m[1], spec, nil
		}
		s.log.Warn("mock directive names no turn", "name", m[1])
	}
	for i, rule := range s.script.Rules {
		if !rule.When.matches(req) {
			continue
		}
		if rule.Turn.Spec != nil {
			return fmt.Sprintf("rules[%d]", i), *rule.Turn.Spec, nil
		}
		if spec, ok := s.namedTurn(rule.Turn.Name); ok {
			return rule.Turn.Name, spec, nil
		}
	}
	if req.toolResults > 0 {
		return "default_tool_results", TurnSpec{Kind: KindText}, nil
	}
	return "default", TurnSpec{Kind: KindText}, nil
}

func (s *Server) namedTurn(name string) (TurnSpec, bool) {
	if spec, ok := s.script.Turns[name]; ok {
		return spec, true
	}
	return builtinTurn(name)
}

func (m Match) matches(req *turnRequest) bool {
	switch m.API {
	case "":
	case "openai":
		if req.api == APIAnthropic {
			return false
		}
	default:
		if API(m.API) != req.api {
			return false
		}
	}
	if m.LastUserContains != "" && !strings.Contains(req.lastUserText, m.LastUserContains) {
		return false
	}
	if m.HasToolResults != nil && *m.HasToolResults != (req.toolResults > 0) {
		return false
	}
	if m.Model != "" {
		if prefix, ok := strings.CutSuffix(m.Model, "*"); ok {
			if !strings.HasPrefix(req.model, prefix) {
				return false
			}
		} else if m.Model != req.model {
			return false
		}
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
	}
	req := parseTurnRequest(api, x.body)
	name, spec, err := x.s.chooseTurn(x.r.Header, req)
	x.s.update(x.rec, func(rec *RecordedRequest) {
		rec.Turn, rec.Model, rec.Stream = name, req.model, req.stream
	})
	if err != nil {
		x.fail(http.StatusBadRequest, "invalid_request_error", err.Error(), nil)
		return
	}

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
	x.w.WriteHeader(http.StatusOK)
	canceled := func() { x.s.update(x.rec, func(rec *RecordedRequest) { rec.Canceled = true }) }
	for i, ev := range events {
		if i > 0 && p.eventDelay > 0 {
			if err := x.s.sleep(ctx, p.eventDelay); err != nil {
				canceled()
				return
			}
		}
		if ctx.Err() != nil {
			canceled()
			return
		}
		if _, err := x.w.Write(ev.appendTo(nil)); err != nil {
			canceled()
			return
		}
		if err := rc.Flush(); err != nil {
			canceled()
			return
		}
		now := x.s.clock()
		x.s.update(x.rec, func(rec *RecordedRequest) { rec.EventTimes = append(rec.EventTimes, now) })
	}
	if p.fail == failDisconnect {
		x.abort(nil)
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
	if x.fam == familyAnthropic {
		x.fail(http.StatusNotFound, "not_found_error", "Not Found", nil)
		return
	}
	x.fail(http.StatusNotFound, "invalid_request_error",
		fmt.Sprintf("Invalid URL (%s %s)", x.r.Method, x.r.URL.Path), nil)
}
