package passthrough

import (
	"context"
	"log"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

	"gatekeeper/proxy/internal/keys"
	"gatekeeper/proxy/internal/wire"
)

// Options are what one provider's reverse proxy is built from.
type Options struct {
	Provider  string   // the provider's name, for logs and errors
	Target    *url.URL // its base URL
	Pool      *keys.Pool
	Transport http.RoundTripper
	Buffers   httputil.BufferPool
	Logger    *slog.Logger
	// Redact takes every fragment of a provider key, and of own (the
	// credentials a forwarding agent sent), out of an error reply, in
	// place.
	Redact func(resp *http.Response, own []string)
	// WriteError answers the agent with err (an *Error or ErrClientGone)
	// in the provider's error form.
	WriteError func(http.ResponseWriter, error)
}

// Request is what the reverse proxy's hooks need of one pass-through
// request; it travels in the request's context (With).
type Request struct {
	Path string     // the canonical escaped path below the provider prefix: the spelling that was classified
	Keys *keys.Turn // the request's use of the pool's keys
	// Own are the provider credentials of an agent of a tenant with
	// credentials: forward (wire.Credentials), which go on unchanged in
	// place of a pool key; nil for any other tenant.
	Own []string
}

type ctxKey struct{}

// With is ctx carrying pr for the reverse proxy's hooks.
func With(ctx context.Context, pr *Request) context.Context {
	return context.WithValue(ctx, ctxKey{}, pr)
}

func from(ctx context.Context) *Request {
	pr, _ := ctx.Value(ctxKey{}).(*Request)
	return pr
}

// NewProxy builds the reverse proxy of one provider's pass-through
// routes (turns go through their own send path instead). Each request it
// serves must carry its Request (With).
func NewProxy(o Options) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite:        o.rewrite,
		Transport:      o.Transport,
		FlushInterval:  -1,
		BufferPool:     o.Buffers,
		ModifyResponse: modifyResponse(o.Redact),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// The provider could not be reached, or its reply not read,
			// before any byte went to the agent.
			o.WriteError(w, Unreachable(r.Context(), o.Logger, o.Provider, err))
		},
		ErrorLog: log.New(slogWriter{o.Logger}, "", 0),
	}
}

// rewrite points a pass-through request at the provider and swaps the
// agent's virtual key for a provider key (the grant's, when the scheduler
// placed it on one), or, for an agent that sends its own credential,
// drops gatekeeper's headers and leaves the credential as it came.
// Everything else the agent sent (query, headers, body) goes out as it
// came.
func (o Options) rewrite(pr *httputil.ProxyRequest) {
	req := from(pr.In.Context())
	out := pr.Out
	out.URL.Scheme = o.Target.Scheme
	out.URL.Host = o.Target.Host
	base := strings.TrimSuffix(o.Target.Path, "/")
	if p, err := url.PathUnescape(base + req.Path); err == nil {
		out.URL.Path, out.URL.RawPath = p, base+req.Path
	}
	out.Host = ""
	if req.Own != nil {
		ForwardedHeader(out.Header, nil)
		return
	}
	out.URL.RawQuery = wire.ForwardQuery(out.URL.RawQuery)
	ProviderHeader(out.Header, o.Pool, req.Keys.Key(), nil)
}

// modifyResponse keeps a pass-through reply's headers for its key's
// settle and takes every fragment of a provider key out of an error reply.
func modifyResponse(redact func(*http.Response, []string)) func(*http.Response) error {
	return func(resp *http.Response) error {
		req := from(resp.Request.Context())
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			// Forwarded, but never with a fragment of a provider key in it.
			redact(resp, req.Own)
		}
		req.Keys.KeepHeader(resp.Header.Clone())
		return nil
	}
}

// slogWriter lets the reverse proxy's log.Logger write into slog.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.l.Warn(strings.TrimSpace(string(p)))
	return len(p), nil
}
