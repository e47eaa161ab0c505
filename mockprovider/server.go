package mockprovider

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"gatekeeper/internal/clock"
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
	// RateLimit, when set, enforces a provider's rate limits per key and
	// answers 429 above them; RateCounts reports what it did.
	RateLimit RateLimit
	// RequestsPerMinute is the request limit every reply's rate-limit
	// headers advertise, with what is left of it in the current
	// one-minute window (every request the mock serves counts), unless
	// RateLimit is set (its levels replace those headers). It is only
	// advertised: past it the headers report none left until the window
	// ends, and a client that obeys them waits, so a load of more
	// requests a minute sets it above that load. 0 means
	// DefaultRequestsPerMinute.
	RequestsPerMinute int
	// TokensPerMinute is the token limit those headers advertise, with
	// what is left of it after the request's input. 0 means
	// DefaultTokensPerMinute.
	TokensPerMinute int64
}

// DefaultMaxRecords is the number of requests a Server remembers unless
// Options.MaxRecords says otherwise.
const DefaultMaxRecords = 1000

// DefaultRequestsPerMinute is the request limit the rate-limit headers
// advertise unless Options.RequestsPerMinute says otherwise.
const DefaultRequestsPerMinute = 4000

// DefaultTokensPerMinute is the token limit the rate-limit headers
// advertise unless Options.TokensPerMinute says otherwise.
const DefaultTokensPerMinute = 2_000_000

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
	rpm    int64        // advertised requests a minute
	tpm    int64        // advertised tokens a minute
	rate   *rateLimiter // nil when no rate limit is enforced

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
		rpm:    int64(opts.RequestsPerMinute),
		tpm:    opts.TokensPerMinute,
		rnd:    opts.Rand,
		idle:   make(chan struct{}),
	}
	close(s.idle)
	if opts.RateLimit.enabled() {
		s.rate = newRateLimiter(opts.RateLimit)
	}
	if s.script == nil {
		s.script = &Script{}
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	if s.limit <= 0 {
		s.limit = DefaultMaxRecords
	}
	if s.rpm <= 0 {
		s.rpm = DefaultRequestsPerMinute
	}
	if s.tpm <= 0 {
		s.tpm = DefaultTokensPerMinute
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
	return clock.Sleep(ctx, d)
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

// Reset forgets the recorded requests, restarts the rate-limit counters
// and refills every key's rate-limit buckets.
func (s *Server) Reset() {
	s.mu.Lock()
	s.records = nil
	s.window, s.windowCount = time.Time{}, 0
	s.mu.Unlock()
	if s.rate != nil {
		s.rate.reset()
	}
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
	case x.fam == familyGemini:
		x.geminiRequest(path)
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
	if strings.HasPrefix(r.URL.Path, "/v1beta/") || strings.HasPrefix(r.URL.Path, "/v1/models/") && strings.Contains(r.URL.Path, ":") ||
		r.Header.Get("x-goog-api-key") != "" {
		return familyGemini
	}
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
