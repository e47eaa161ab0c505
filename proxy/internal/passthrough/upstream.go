package passthrough

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"time"

	"gatekeeper/config"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/dialect"
	"gatekeeper/proxy/internal/keys"
	"gatekeeper/proxy/internal/wire"
	"gatekeeper/streaming"
)

// Shared is what every provider's upstream is built with.
type Shared struct {
	Transport http.RoundTripper
	Buffers   httputil.BufferPool
	Logger    *slog.Logger
	// Secrets is every provider's keys, each redacted from error replies;
	// read when a reply comes, so that it holds the providers built later.
	Secrets func() []string
}

// Upstream is one configured provider as requests reach it.
type Upstream struct {
	Target *url.URL
	API    streaming.API // the API family, whose error format its routes answer in
	Pool   *keys.Pool
	Allow  []config.Passthrough // what may pass through besides turns (wire.Allowlist)
	Proxy  *httputil.ReverseProxy
}

// Build checks provider p's base URL and API family and builds its key
// pool, its allowlist and the reverse proxy of its pass-through routes.
func Build(p *config.Provider, sh Shared) (*Upstream, error) {
	u, err := url.Parse(p.BaseURL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("provider %s: base_url %q is not an absolute URL", p.Name, p.BaseURL)
	}
	family := dialect.Family(p.API)
	if family == nil {
		return nil, fmt.Errorf("provider %s: unknown api %q", p.Name, p.API)
	}
	up := &Upstream{Target: u, API: family.API, Pool: keys.NewPool(p), Allow: wire.Allowlist(p)}
	up.Proxy = NewProxy(Options{Provider: p.Name, Target: u, Pool: up.Pool, Transport: sh.Transport, Buffers: sh.Buffers, Logger: sh.Logger,
		Redact: func(resp *http.Response, own []string) {
			RedactErrorBody(resp, p.Name, up.API, slices.Concat(sh.Secrets(), own))
		},
		WriteError: func(w http.ResponseWriter, err error) { apierr.Write(w, up.API, AgentError(err)) }})
	return up, nil
}

// NewTransport is the upstream transport: bounded connection setup, no
// overall timeout (replies stream for minutes), HTTP/2 when offered.
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// RedactErrorBody removes every fragment of keys from an error reply of
// provider (wire.RedactErrorBody); a body it cannot check is replaced by
// a message of gatekeeper's own in api's error format.
func RedactErrorBody(resp *http.Response, provider string, api streaming.API, keys []string) {
	wire.RedactErrorBody(resp, keys, func(status int) []byte {
		return apierr.Body(api, apierr.Upstream, "provider "+provider+" answered "+strconv.Itoa(status)+
			" with a body gatekeeper could not check for key fragments; see gatekeeper's logs")
	})
}

// AgentError is err in the agent's error form: an *Error becomes the
// upstream_error it describes, ErrClientGone the bare 499 of
// apierr.ErrClientGone; any other error is returned as it is.
func AgentError(err error) error {
	var pe *Error
	switch {
	case errors.Is(err, ErrClientGone):
		return apierr.ErrClientGone
	case errors.As(err, &pe):
		return &apierr.Error{Code: pe.Status, Type: apierr.Upstream, RetryAfter: pe.RetryAfter, Msg: pe.Msg, Err: pe.Err}
	}
	return err
}
