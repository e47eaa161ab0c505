package approvals

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"gatekeeper/config"
	"gatekeeper/internal/clock"
)

// Keys of Request.Channels where the Slack message of a request is kept, so
// Decided can update it in place.
const (
	SlackChannelKey = "slack.channel"
	SlackTSKey      = "slack.ts"
)

// Bounds of the Slack Web API client.
const (
	slackAttempts      = 4                // tries per Web API call
	slackMaxRetryAfter = 30 * time.Second // a longer Retry-After gives up instead
	slackMaxReply      = 1 << 20          // bytes of a Web API reply read
	slackAttemptTime   = 10 * time.Second // per try
)

// SlackError is a failed Slack Web API call: Code is Slack's error code
// ("channel_not_found", "invalid_auth", ...) when it answered ok:false, else
// empty and Status is the HTTP status.
type SlackError struct {
	Method string
	Status int
	Code   string
}

func (e *SlackError) Error() string {
	if e.Code != "" {
		return "approvals: slack " + e.Method + ": " + e.Code
	}
	return fmt.Sprintf("approvals: slack %s: HTTP %d", e.Method, e.Status)
}

// Slack posts a Block Kit message per approval request to one channel, with
// Approve and Deny buttons, and updates it in place once the request is
// decided. Its Handler receives the button presses.
type Slack struct {
	cfg    config.Slack
	apiURL string
	store  Store
	people *Directory
	client *http.Client
	now    func() time.Time
	wait   func(ctx context.Context, d time.Duration) error
	log    *slog.Logger
}

var _ Notifier = (*Slack)(nil)

// SlackOption configures NewSlack.
type SlackOption func(*Slack)

// WithSlackClient sets the HTTP client of Web API calls (default: one that
// does not follow redirects; each try is bounded by its own timeout).
func WithSlackClient(c *http.Client) SlackOption { return func(s *Slack) { s.client = c } }

// WithSlackClock sets the clock that checks request timestamps and stamps
// votes.
func WithSlackClock(now func() time.Time) SlackOption { return func(s *Slack) { s.now = now } }

// WithSlackLogger sets the logger (default slog.Default()).
func WithSlackLogger(l *slog.Logger) SlackOption { return func(s *Slack) { s.log = l } }

// WithSlackPeople sets who the Slack users pressing the buttons are
// (default: approvals.slack.users of the config given to NewSlack).
func WithSlackPeople(d *Directory) SlackOption { return func(s *Slack) { s.people = d } }

// WithSlackWait sets how a retry waits out a delay, so tests of Retry-After
// need not sleep.
func WithSlackWait(wait func(ctx context.Context, d time.Duration) error) SlackOption {
	return func(s *Slack) { s.wait = wait }
}

// NewSlack returns the Slack notifier of cfg. store is where the posted
// message's channel and ts are kept (Request.Channels) and where deliveries
// of button presses are claimed against replay.
func NewSlack(cfg config.Slack, store Store, opts ...SlackOption) *Slack {
	s := &Slack{
		cfg:    cfg,
		apiURL: strings.TrimRight(cfg.APIURL, "/"),
		store:  store,
		people: NewDirectory(config.Approvals{Slack: &cfg}),
		client: &http.Client{CheckRedirect: noRedirect},
		now:    time.Now,
		wait:   clock.Sleep,
		log:    slog.Default(),
	}
	if s.apiURL == "" {
		s.apiURL = config.DefaultSlackAPIURL
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Announce posts r's message with its buttons and keeps the message's
// channel and ts on the request. A request already decided when this runs
// is posted in its decided form.
func (s *Slack) Announce(ctx context.Context, r *Request) error {
	reply, err := s.call(ctx, "chat.postMessage", s.message(r, ""))
	if err != nil {
		return err
	}
	stored, err := s.store.Update(ctx, r.ID, func(cur *Request) error {
		if cur.Channels == nil {
			cur.Channels = make(map[string]string, 2)
		}
		cur.Channels[SlackChannelKey] = reply.Channel
		cur.Channels[SlackTSKey] = reply.TS
		return nil
	})
	if err != nil {
		return fmt.Errorf("approvals: keep slack message of %s: %w", r.ID, err)
	}
	// A decision that landed between the post and the update above found no
	// ts to update: bring the message up to date here.
	if r.State == Pending && stored.State != Pending {
		_, err = s.call(ctx, "chat.update", s.message(stored, reply.TS))
	}
	return err
}

// Decided replaces r's buttons by its outcome, in place. A request whose
// message was never posted (Slack was down at Announce) gets a new message,
// so the channel still learns the outcome.
func (s *Slack) Decided(ctx context.Context, r *Request) error {
	ts := r.Channels[SlackTSKey]
	if ts == "" {
		// r may predate Announce's update: the store has the latest.
		if cur, err := s.store.Get(ctx, r.ID); err == nil {
			r = cur
			ts = r.Channels[SlackTSKey]
		}
	}
	if ts == "" {
		_, err := s.call(ctx, "chat.postMessage", s.message(r, ""))
		return err
	}
	_, err := s.call(ctx, "chat.update", s.message(r, ts))
	return err
}

// slackReply is the part of a Web API reply that is read.
type slackReply struct {
	OK      bool   `json:"ok"`
	Error   string `json:"error"`
	Channel string `json:"channel"`
	TS      string `json:"ts"`
}

// call POSTs body to a Web API method, retrying 429 (after its Retry-After),
// 5xx and network errors a bounded number of times. A retried postMessage
// whose first try did reach Slack may post twice; a message too many beats
// approvers never hearing of the request.
func (s *Slack) call(ctx context.Context, method string, body any) (*slackReply, error) {
	payload, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("approvals: slack %s: %w", method, err)
	}
	var reply *slackReply
	err = retrying(ctx, slackAttempts, s.wait, func(int) (retry bool, err error) {
		reply, retry, err = s.try(ctx, method, payload)
		return retry, err
	})
	return reply, err
}

// try makes one Web API call; retry says whether another try may succeed.
func (s *Slack) try(ctx context.Context, method string, payload []byte) (reply *slackReply, retry bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, slackAttemptTime)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.apiURL+"/"+method, bytes.NewReader(payload))
	if err != nil {
		return nil, false, fmt.Errorf("approvals: slack %s: %w", method, err)
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Authorization", "Bearer "+s.cfg.BotToken)
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, true, fmt.Errorf("approvals: slack %s: %w", method, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, slackMaxReply))
	if err != nil {
		return nil, true, fmt.Errorf("approvals: slack %s: read reply: %w", method, err)
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		after, ok := parseRetryAfter(resp.Header.Get("Retry-After"))
		if !ok {
			return nil, false, &SlackError{Method: method, Status: resp.StatusCode}
		}
		return nil, true, &retryAfterError{after: after, err: &SlackError{Method: method, Status: resp.StatusCode}}
	case resp.StatusCode >= 500:
		return nil, true, &SlackError{Method: method, Status: resp.StatusCode}
	case resp.StatusCode != http.StatusOK:
		return nil, false, &SlackError{Method: method, Status: resp.StatusCode}
	}
	reply = new(slackReply)
	if err := json.Unmarshal(raw, reply); err != nil {
		return nil, false, fmt.Errorf("approvals: slack %s: reply is not JSON: %w", method, err)
	}
	if !reply.OK {
		code := reply.Error
		if code == "" {
			code = "unknown_error"
		}
		return nil, code == "ratelimited", &SlackError{Method: method, Status: resp.StatusCode, Code: code}
	}
	return reply, false, nil
}

// retryAfterError carries a 429's Retry-After to the retry loop.
type retryAfterError struct {
	after time.Duration
	err   error
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// parseRetryAfter reads a Retry-After in seconds (what Slack sends), 1 s
// when absent; false when it is longer than is worth waiting.
func parseRetryAfter(v string) (time.Duration, bool) {
	if v == "" {
		return time.Second, true
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return time.Second, true
	}
	d := time.Duration(n) * time.Second
	return d, d <= slackMaxRetryAfter
}

// retrying runs try (attempt 0, 1, ...) up to attempts times while it fails with retry set and
// ctx lasts, waiting before each retry the Retry-After the last failure
// carried, else the backoff. It returns the last failure, joined with
// ctx's error when ctx ended a wait.
func retrying(ctx context.Context, attempts int, wait func(context.Context, time.Duration) error, try func(attempt int) (retry bool, err error)) error {
	var last error
	for attempt := range attempts {
		if attempt > 0 {
			delay := backoff(attempt)
			var ra *retryAfterError
			if errors.As(last, &ra) {
				delay = ra.after
			}
			if err := wait(ctx, delay); err != nil {
				return errors.Join(last, err)
			}
		}
		retry, err := try(attempt)
		if err == nil {
			return nil
		}
		last = err
		if !retry || ctx.Err() != nil {
			break
		}
	}
	return last
}

// backoff is the wait before try number attempt (1, 2, ...): 500 ms doubling.
func backoff(attempt int) time.Duration {
	return 500 * time.Millisecond << (attempt - 1)
}

// noRedirect keeps a bearer token or a signed body from following a
// redirect anywhere.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
