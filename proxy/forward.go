package proxy

import (
	"context"
	"errors"
	"log"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"gatekeeper/proxy/internal/wire"
)

// newReverseProxy builds the reverse proxy of one provider's
// pass-through routes (turns go through send and relay instead).
// Per-request facts reach its hooks through the outgoing request's
// context.
func (s *Server) newReverseProxy(up *upstream) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite:        func(pr *httputil.ProxyRequest) { s.rewrite(pr, up) },
		Transport:      s.transport,
		FlushInterval:  -1,
		BufferPool:     s.bufs,
		ModifyResponse: s.modifyResponse,
		ErrorHandler:   s.passError,
		ErrorLog:       log.New(slogWriter{s.log}, "", 0),
	}
}

// rewrite points a pass-through request at the provider and swaps the
// agent's virtual key for a provider key (the grant's, when the scheduler
// placed it on one). Everything else the agent sent (query, headers,
// body) goes out as it came.
func (s *Server) rewrite(pr *httputil.ProxyRequest, up *upstream) {
	st := stateFrom(pr.In.Context())
	out := pr.Out
	out.URL.Scheme = up.target.Scheme
	out.URL.Host = up.target.Host
	base := strings.TrimSuffix(up.target.Path, "/")
	rest := st.req.rest
	// rest is the canonical path: the spelling that was classified.
	if p, err := url.PathUnescape(base + rest); err == nil {
		out.URL.Path, out.URL.RawPath = p, base+rest
	}
	out.Host = ""
	providerHeader(out.Header, up, nil)
	if g := st.pass.Grant(); g != nil {
		up.pool.SetKey(out.Header, up.pool.Secret(g.Key.ID))
	}
	// An error reply is read to redact key fragments: ask for it plain.
	out.Header.Set("Accept-Encoding", "identity")
}

// providerHeader makes the agent's headers the provider's: the agent's
// keys, gatekeeper's own headers and the other headers of the header
// policy (headers.go) dropped, the provider key put in (the
// grant's key when the scheduler placed t on one), and for a turn its
// trace context and a request for an uncompressed reply. A model call's
// send (turns and continuations alike) and the pass-through rewrite both
// go through it. t is nil for pass-through requests.
func providerHeader(h http.Header, up *upstream, t *turn) {
	wire.StripAgentHeaders(h)
	if t == nil {
		up.pool.SetKey(h, up.pool.Pick())
	} else {
		// The provider sees the turn's span as the caller of its call.
		t.tt.Inject(h)
		up.pool.SetKey(h, t.rate.Key())
		// Replies are decoded while they stream: ask for them uncompressed.
		h.Set("Accept-Encoding", "identity")
	}
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = nil // send none rather than Go's default
	}
}

// modifyResponse keeps a pass-through reply's headers for its key's
// settle and takes every fragment of a provider key out of an error reply.
func (s *Server) modifyResponse(resp *http.Response) error {
	st := stateFrom(resp.Request.Context())
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// Forwarded, but never with a fragment of a provider key in it.
		redactErrorBody(resp, st.req.up, s.secrets)
	}
	h := resp.Header.Clone()
	st.pass.KeepHeader(h)
	return nil
}

// passError answers a pass-through request whose provider could not be
// reached, or whose reply could not be read before any byte went to the
// agent.
func (s *Server) passError(w http.ResponseWriter, r *http.Request, err error) {
	st := stateFrom(r.Context())
	writeError(w, st.req.up.api, s.unreachable(r.Context(), st.req.up, err))
}

// unreachable is the answer when provider up could not be reached, or its
// reply read, before any byte went to the agent: none when the agent went
// away (errClientGone), else a 502 (a 504 for a timeout) that asks for a
// retry.
func (s *Server) unreachable(ctx context.Context, up *upstream, err error) error {
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		// The agent went away; nobody is left to answer.
		return errClientGone
	}
	s.log.LogAttrs(ctx, slog.LevelWarn, "upstream unreachable",
		slog.String("provider", up.cfg.Name), slog.String("error", err.Error()))
	code := http.StatusBadGateway
	if errors.Is(err, context.DeadlineExceeded) {
		code = http.StatusGatewayTimeout
	}
	return &HTTPError{Code: code, Type: errUpstream, RetryAfter: upstreamRetryAfter,
		Msg: "gatekeeper could not get a reply from provider " + up.cfg.Name + "; retry later", Err: err}
}

// upstreamRetryAfter is what a 502 or 504 for a provider gatekeeper could
// not reach asks the agent to wait.
const upstreamRetryAfter = 5 * time.Second

// slogWriter lets the reverse proxy's log.Logger write into slog.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.l.Warn(strings.TrimSpace(string(p)))
	return len(p), nil
}
