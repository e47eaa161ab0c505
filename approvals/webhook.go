package approvals

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"gatekeeper/config"
	"gatekeeper/internal/clock"
)

// Event types of the webhook.
const (
	EventRequested = "approval.requested"
	EventDecided   = "approval.decided"
)

// Standard Webhooks headers.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

// WebhookTolerance is how far a delivery's timestamp may be from now.
const WebhookTolerance = 5 * time.Minute

// Bounds of webhook delivery.
const (
	webhookAttempts    = 4
	webhookAttemptTime = 10 * time.Second
)

// ErrWebhookSecret says a webhook secret is not "whsec_" + base64 of a
// non-empty key. The secret itself is never in an error.
var ErrWebhookSecret = errors.New(`approvals: webhook secret must be "whsec_" followed by base64`)

// WebhookError is a delivery the receiver answered with a non-2xx status.
type WebhookError struct{ Status int }

func (e *WebhookError) Error() string {
	return fmt.Sprintf("approvals: webhook answered HTTP %d", e.Status)
}

// Webhook announces every request and decision to one URL as a Standard
// Webhooks delivery (webhook-id, webhook-timestamp, webhook-signature), for
// chat tools other than Slack.
type Webhook struct {
	url    string
	key    []byte
	client *http.Client
	now    func() time.Time
	wait   func(ctx context.Context, d time.Duration) error
	log    *slog.Logger
}

var _ Notifier = (*Webhook)(nil)

// WebhookOption configures NewWebhook.
type WebhookOption func(*Webhook)

// WithWebhookClient sets the HTTP client (default: one that does not follow
// redirects; each try is bounded by its own timeout).
func WithWebhookClient(c *http.Client) WebhookOption { return func(w *Webhook) { w.client = c } }

// WithWebhookClock sets the clock of timestamps.
func WithWebhookClock(now func() time.Time) WebhookOption { return func(w *Webhook) { w.now = now } }

// WithWebhookLogger sets the logger (default slog.Default()).
func WithWebhookLogger(l *slog.Logger) WebhookOption { return func(w *Webhook) { w.log = l } }

// WithWebhookWait sets how a retry waits out its backoff.
func WithWebhookWait(wait func(ctx context.Context, d time.Duration) error) WebhookOption {
	return func(w *Webhook) { w.wait = wait }
}

// NewWebhook returns the webhook notifier of cfg: an absolute http(s) URL
// and a "whsec_" secret.
func NewWebhook(cfg config.Webhook, opts ...WebhookOption) (*Webhook, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("approvals: webhook url must be an absolute http(s) URL")
	}
	key, err := webhookKey(cfg.Secret)
	if err != nil {
		return nil, err
	}
	w := &Webhook{
		url:    cfg.URL,
		key:    key,
		client: &http.Client{CheckRedirect: noRedirect},
		now:    time.Now,
		wait:   clock.Sleep,
		log:    slog.Default(),
	}
	for _, o := range opts {
		o(w)
	}
	return w, nil
}

// webhookKey decodes a "whsec_<base64>" secret.
func webhookKey(secret string) ([]byte, error) {
	enc, ok := strings.CutPrefix(secret, config.WebhookSecretPrefix)
	if !ok {
		return nil, ErrWebhookSecret
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(key) == 0 {
		return nil, ErrWebhookSecret
	}
	return key, nil
}

// Announce delivers approval.requested with r.
func (w *Webhook) Announce(ctx context.Context, r *Request) error {
	return w.send(ctx, EventRequested, r)
}

// Decided delivers approval.decided with r.
func (w *Webhook) Decided(ctx context.Context, r *Request) error {
	return w.send(ctx, EventDecided, r)
}

// webhookEvent is the body of a delivery.
type webhookEvent struct {
	Type      string   `json:"type"`
	Timestamp string   `json:"timestamp"`
	Data      *Request `json:"data"`
}

// send delivers one event, retrying 429, 5xx and network errors with
// backoff. Every try carries the same webhook-id, so a receiver can drop
// the duplicates of a delivery whose answer was lost; each is signed with
// its own timestamp, so a late retry is still within the tolerance.
func (w *Webhook) send(ctx context.Context, event string, r *Request) error {
	body, err := json.Marshal(webhookEvent{Type: event, Timestamp: w.now().UTC().Format(time.RFC3339), Data: r})
	if err != nil {
		return fmt.Errorf("approvals: webhook %s: %w", event, err)
	}
	id := "msg_" + r.ID + "_" + strings.TrimPrefix(event, "approval.")
	return retrying(ctx, webhookAttempts, w.wait, func(attempt int) (bool, error) {
		retry, err := w.try(ctx, id, body)
		if err != nil {
			w.log.Warn("webhook delivery failed", "approval_id", r.ID, "event", event, "attempt", attempt+1, "err", err)
		}
		return retry, err
	})
}

// try makes one delivery; retry says whether another may succeed.
func (w *Webhook) try(ctx context.Context, id string, body []byte) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, webhookAttemptTime)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return false, fmt.Errorf("approvals: webhook: %w", err)
	}
	ts := strconv.FormatInt(w.now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderWebhookID, id)
	req.Header.Set(HeaderWebhookTimestamp, ts)
	req.Header.Set(HeaderWebhookSignature, "v1,"+signWebhook(w.key, id, ts, body))
	resp, err := w.client.Do(req)
	if err != nil {
		// Without the URL: a webhook URL is often a capability itself.
		return true, fmt.Errorf("approvals: webhook: %w", redactURLError(err))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, slackMaxReply))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return false, nil
	case resp.StatusCode == http.StatusTooManyRequests:
		after, ok := parseRetryAfter(resp.Header.Get("Retry-After"))
		if !ok {
			return false, &WebhookError{Status: resp.StatusCode}
		}
		return true, &retryAfterError{after: after, err: &WebhookError{Status: resp.StatusCode}}
	case resp.StatusCode >= 500:
		return true, &WebhookError{Status: resp.StatusCode}
	}
	return false, &WebhookError{Status: resp.StatusCode}
}

// signWebhook is base64(HMAC-SHA256(key, id + "." + ts + "." + body)).
func signWebhook(key []byte, id, ts string, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// VerifyWebhook checks a Standard Webhooks delivery as a receiver would:
// the three headers present, webhook-timestamp within WebhookTolerance of
// now, and one of the space-separated "v1,<base64>" signatures of
// webhook-signature matching, compared in constant time.
func VerifyWebhook(secret string, h http.Header, body []byte, now time.Time) error {
	key, err := webhookKey(secret)
	if err != nil {
		return err
	}
	id, tsHeader, sigs := h.Get(HeaderWebhookID), h.Get(HeaderWebhookTimestamp), h.Get(HeaderWebhookSignature)
	if id == "" || sigs == "" {
		return ErrBadSignature
	}
	ts, err := strconv.ParseInt(tsHeader, 10, 64)
	if err != nil || !withinTolerance(ts, now, WebhookTolerance) {
		return ErrBadTimestamp
	}
	want := []byte(signWebhook(key, id, strconv.FormatInt(ts, 10), body))
	for _, sig := range strings.Fields(sigs) {
		version, value, ok := strings.Cut(sig, ",")
		if ok && version == "v1" && hmac.Equal([]byte(value), want) {
			return nil
		}
	}
	return ErrBadSignature
}
