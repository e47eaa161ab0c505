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
	"sync/atomic"
	"time"

	"gatekeeper/proxy/internal/wire"
	"gatekeeper/streaming"
)

// newReverseProxy builds the reverse proxy for one provider. Per-request
// facts reach its hooks through the outgoing request's context.
func (s *Server) newReverseProxy(up *upstream) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite:        func(pr *httputil.ProxyRequest) { s.rewrite(pr, up) },
		Transport:      keyedTransport{s: s, next: s.transport},
		FlushInterval:  -1, // flush every write: events are handed over whole, one per Read
		BufferPool:     s.bufs,
		ModifyResponse: s.modifyResponse,
		ErrorHandler:   s.upstreamError,
		ErrorLog:       log.New(slogWriter{s.log}, "", 0),
	}
}

// rewrite points the outgoing request at the provider and swaps the
// agent's virtual key for a provider key. Everything else the agent sent
// (query, headers, body) goes out as it came.
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
	providerHeader(out.Header, up, st.turn)
	if st.pass != nil {
		if g := st.pass.grant; g != nil {
			setProviderKey(out.Header, up, up.pool.secrets[g.Key.ID])
		}
		// An error reply is read to redact key fragments: ask for it plain.
		out.Header.Set("Accept-Encoding", "identity")
	}
}

// providerHeader makes the agent's headers the provider's: the agent's
// keys, gatekeeper's own headers and the other headers of the header
// policy (headers.go) dropped, the provider key put in (the
// grant's key when the scheduler placed t on one), and for a turn its
// trace context and a request for an uncompressed reply. The reverse
// proxy and a held turn's continuation both send through it. t is nil for
// pass-through requests.
func providerHeader(h http.Header, up *upstream, t *turn) {
	wire.StripAgentHeaders(h)
	if t == nil {
		setProviderKey(h, up, up.pickKey())
	} else {
		// The provider sees the turn's span as the caller of its call.
		t.tt.Inject(h)
		if g := t.grant.Load(); g != nil {
			setProviderKey(h, up, up.pool.secrets[g.Key.ID])
		} else {
			setProviderKey(h, up, up.pickKey())
		}
		// Replies are decoded while they stream: ask for them uncompressed.
		h.Set("Accept-Encoding", "identity")
	}
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = nil // send none rather than Go's default
	}
}

// pickKey takes the pool's keys in turn, for requests the rate-limit
// scheduler did not place on a key (pass-through requests, pools without
// limits).
func (up *upstream) pickKey() string {
	keys := up.cfg.Keys
	n := atomic.AddUint64(&up.next, 1)
	return keys[int(n-1)%len(keys)].Key
}

// modifyResponse marks every proxied reply with its trajectory and, for
// turns, tees the body through the decoder.
func (s *Server) modifyResponse(resp *http.Response) error {
	st := stateFrom(resp.Request.Context())
	if st == nil {
		return nil
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// Forwarded, but never with a fragment of a provider key in it.
		redactErrorBody(resp, st.req.up, s.secrets)
	}
	if st.pass != nil {
		h := resp.Header.Clone()
		st.pass.header.Store(&h)
	}
	if st.turn == nil {
		return nil
	}
	return st.turn.attach(resp)
}

// upstreamError answers when the provider could not be reached or the
// reply could not be read before any byte went to the agent.
func (s *Server) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	st := stateFrom(r.Context())
	if st != nil && st.turn != nil {
		t := st.turn
		if why := t.stopReason(); why != stopNone {
			t.finish(t.outcomeOf(&streaming.Result{}, 0, err))
			if why == stopKill {
				panic(http.ErrAbortHandler) // a killed run gets no answer
			}
			typ, msg := t.stopError()
			code := http.StatusForbidden
			switch why {
			case stopDeadline:
				code = http.StatusGatewayTimeout
			case stopShutdown:
				code = http.StatusServiceUnavailable
			}
			writeError(w, st.req.api, &HTTPError{Code: code, Type: typ, Msg: msg, NoRetry: why == stopCancel})
			return
		}
		t.failed(err)
		var he *HTTPError
		if errors.As(err, &he) {
			// The escrow's answer for a held non-streamed turn.
			writeError(w, st.req.api, he)
			return
		}
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		// The agent went away; nobody is left to answer.
		w.WriteHeader(499)
		return
	}
	api := st.req.api
	if api == "" {
		api = st.req.up.api
	}
	s.log.LogAttrs(r.Context(), slog.LevelWarn, "upstream unreachable",
		slog.String("provider", st.req.up.cfg.Name), slog.String("error", err.Error()))
	code := http.StatusBadGateway
	if errors.Is(err, context.DeadlineExceeded) {
		code = http.StatusGatewayTimeout
	}
	writeError(w, api, &HTTPError{Code: code, Type: errUpstream, RetryAfter: upstreamRetryAfter,
		Msg: "gatekeeper could not get a reply from provider " + st.req.up.cfg.Name + "; retry later"})
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
