package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/coding"
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/proxy/internal/passthrough"
	"gatekeeper/proxy/relay"
	"gatekeeper/streaming"
)

// send is the one way a model call leaves gatekeeper, a turn's and a held
// turn's continuation alike: t's body, to t's provider on t's path (with
// query, the agent's query string), under the agent's headers hdr made the
// provider's (outgoing), through the keyed transport, which moves a call
// the provider refuses before any byte to another key of the pool.
//
// The reply comes decoded when the provider compressed it (coding.Decode),
// so that what is metered and gated is what the agent gets. A reply in a
// coding gatekeeper does not decode is refused (codingRefused); an error
// reply in one keeps its status, its body replaced by the redaction that
// cannot read it.
func (t *turn) send(ctx context.Context, hdr http.Header, query string) (*http.Response, error) {
	req, err := t.outgoing(ctx, hdr, query)
	if err != nil {
		return nil, err
	}
	resp, err := t.rate.Transport(t.s.transport, t.log, t.body).RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if err := coding.Decode(resp); err != nil && resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		_ = resp.Body.Close()
		return nil, t.codingRefused(err)
	}
	return resp, nil
}

// codingRefused is the agent's error for a reply in a content coding
// gatekeeper does not decode (err, a *coding.Error): nothing of the
// reply could be read, neither its calls nor its usage, so none of it is
// delivered. The provider answered the same call in it once, so the
// agent is told not to retry.
func (t *turn) codingRefused(err error) *apierr.Error {
	name := ""
	if ce, ok := errors.AsType[*coding.Error](err); ok {
		name = ce.Coding
	}
	return &apierr.Error{Code: http.StatusBadGateway, Type: apierr.Upstream, NoRetry: true, Err: err,
		Msg: fmt.Sprintf("provider %s answered in content coding %q, which gatekeeper does not decode (it decodes gzip, deflate, br and zstd); the reply was not delivered",
			t.req.up.cfg.Name, name)}
}

// outgoing is the request send sends: a POST of t's body to the
// provider's base URL with t's path below it, in the canonical spelling
// that was classified, and the agent's headers less the hop-by-hop and
// forwarding ones (relay.OutgoingHeader) and less its own keys and
// gatekeeper's headers, with the provider key put in (passthrough.ProviderHeader);
// an agent that sends its own credential keeps it (passthrough.ForwardedHeader).
// The request's length is its body's: the transports take it from the
// body, never from a Content-Length header.
func (t *turn) outgoing(ctx context.Context, hdr http.Header, query string) (*http.Request, error) {
	up := t.req.up
	u := *up.target
	base := strings.TrimSuffix(up.target.Path, "/")
	u.Path, u.RawPath = base+t.req.rest, ""
	if p, err := url.PathUnescape(base + t.req.rest); err == nil {
		u.Path, u.RawPath = p, base+t.req.rest
	}
	u.RawQuery, u.Fragment = query, ""
	body := t.body
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.URL, req.Host = &u, ""
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	req.Header = relay.OutgoingHeader(hdr)
	req.Header.Del("Content-Length")
	if t.req.tenant.Forwards() {
		passthrough.ForwardedHeader(req.Header, t.tt.Inject)
		return req, nil
	}
	passthrough.ProviderHeader(req.Header, up.pool, t.rate.Key(), t.tt.Inject)
	return req, nil
}

// sendError is what the agent gets when its turn could not be sent, or
// its reply not read, before any byte went to it: the stopped call's
// error when an operator or the deadline stopped it (none for a killed
// run), the escrow's answer for a held non-streamed turn, none when the
// agent went away, else the provider is unreachable. The turn is settled
// as failed unless it was recorded already.
func (t *turn) sendError(ctx context.Context, err error) error {
	if why := t.stopReason(); why != outcome.NotStopped {
		t.settle(t.outcomeOf(&streaming.Result{}, 0, err))
		if why == outcome.Killed {
			return http.ErrAbortHandler // a killed run gets no answer
		}
		typ, msg := t.stopError()
		code := http.StatusForbidden
		switch why {
		case outcome.Deadline:
			code = http.StatusGatewayTimeout
		case outcome.Shutdown:
			code = http.StatusServiceUnavailable
		}
		return &apierr.Error{Code: code, Type: typ, Msg: msg, NoRetry: why == outcome.Canceled}
	}
	t.failed(err)
	var he *apierr.Error
	if errors.As(err, &he) || errors.Is(err, http.ErrAbortHandler) {
		// The escrow's answer for a held non-streamed turn, or the rate
		// limiter's refusal.
		return err
	}
	return passthrough.AgentError(passthrough.Unreachable(ctx, t.s.log, t.req.up.cfg.Name, err))
}

// relay is the relay step: the provider's reply, labelled with the
// turn's trajectory and taken over by the turn's reader (attach: decoded,
// filtered, held), copied to the agent event by event (relay.Copy). The
// reply's reader records the turn as the reply ends. An error before the
// first byte is sendError's; after it, the agent's connection is aborted
// (http.ErrAbortHandler), as the status went out already.
func (t *turn) relay(ctx context.Context, w http.ResponseWriter, resp *http.Response) error {
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// Forwarded, but never with a fragment of a provider key in it.
		passthrough.RedactErrorBody(resp, t.req.up.cfg.Name, t.req.up.api, t.req.redacted())
	}
	if err := t.attach(resp); err != nil {
		_ = resp.Body.Close()
		return t.sendError(ctx, err)
	}
	buf := t.s.bufs.Get()
	defer t.s.bufs.Put(buf)
	err := relay.Copy(w, resp, buf)
	_ = resp.Body.Close() // records the turn, when its reply did not
	if err != nil {
		t.log.LogAttrs(ctx, slog.LevelDebug, "reply broke off", slog.String("error", err.Error()))
		return http.ErrAbortHandler
	}
	return nil
}
