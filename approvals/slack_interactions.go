package approvals

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Bounds of the interactivity endpoint.
const (
	// SlackMaxBody bounds an interaction delivery; a block_actions payload
	// of one message is a few KiB.
	SlackMaxBody = 64 << 10
	// SlackTolerance is how far a delivery's timestamp may be from now.
	SlackTolerance = 5 * time.Minute
	// slackReplayTTL outlives the tolerance, so a delivery cannot be
	// replayed after its claim is forgotten: by then its timestamp is stale.
	slackReplayTTL = 10 * time.Minute
	// slackVoteTime leaves room in Slack's 3 s to answer.
	slackVoteTime = 2 * time.Second
	// slackFollowUpTime bounds the post of the outcome to response_url.
	slackFollowUpTime = 3 * time.Second
)

// Errors of signed deliveries (Slack interactions, webhooks).
var (
	ErrBadSignature = errors.New("approvals: bad signature")
	ErrBadTimestamp = errors.New("approvals: timestamp missing, malformed or too far from now")
)

// Voter casts votes; *Service is one. The Slack handler needs nothing else.
type Voter interface {
	Vote(ctx context.Context, id string, v Vote) (*Request, error)
}

var _ Voter = (*Service)(nil)

// VerifySlack checks a Slack delivery: X-Slack-Request-Timestamp within
// SlackTolerance of now, and X-Slack-Signature equal to
// "v0=" + hex(HMAC-SHA256(secret, "v0:" + timestamp + ":" + body)),
// compared in constant time.
func VerifySlack(secret string, h http.Header, body []byte, now time.Time) error {
	tsHeader := h.Get("X-Slack-Request-Timestamp")
	ts, err := strconv.ParseInt(tsHeader, 10, 64)
	if err != nil || !withinTolerance(ts, now, SlackTolerance) {
		return ErrBadTimestamp
	}
	sig := h.Get("X-Slack-Signature")
	if sig == "" || secret == "" {
		return ErrBadSignature
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte("v0:" + tsHeader + ":"))
	mac.Write(body)
	want := make([]byte, 0, 3+hex.EncodedLen(sha256.Size))
	want = append(want, "v0="...)
	want = hex.AppendEncode(want, mac.Sum(nil))
	if !hmac.Equal([]byte(sig), want) {
		return ErrBadSignature
	}
	return nil
}

// withinTolerance reports whether unix seconds ts is within tol of now,
// without overflowing on absurd values.
func withinTolerance(ts int64, now time.Time, tol time.Duration) bool {
	const maxUnix = 1 << 40 // year ~36800: beyond is garbage
	if ts <= 0 || ts > maxUnix {
		return false
	}
	d := time.Duration(now.Unix()-ts) * time.Second
	return d <= tol && d >= -tol
}

// interaction is the part of a block_actions payload that is used.
type interaction struct {
	Type string `json:"type"`
	User struct {
		ID string `json:"id"`
	} `json:"user"`
	Actions []struct {
		ActionID string `json:"action_id"`
		Value    string `json:"value"`
	} `json:"actions"`
	ResponseURL string `json:"response_url"`
}

// parseInteraction reads the form body Slack posts: a payload field holding
// JSON.
func parseInteraction(body []byte) (*interaction, error) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("approvals: slack interaction form: %w", err)
	}
	raw := form.Get("payload")
	if raw == "" {
		return nil, errors.New("approvals: slack interaction has no payload")
	}
	in := new(interaction)
	if err := json.Unmarshal([]byte(raw), in); err != nil {
		return nil, fmt.Errorf("approvals: slack interaction payload: %w", err)
	}
	return in, nil
}

// Handler serves POST /hooks/slack/interactions: a press of Approve or Deny
// becomes a vote of the mapped approver. Nothing changes unless the
// delivery is signed with the signing secret, fresh, seen for the first
// time and from a mapped user. A duplicate delivery (Slack retries one it
// got no answer to in 3 s) is refused, never counted: the first may still be
// in flight, and the person can press again. The answer is an ephemeral
// message to the presser; the channel's message is updated through Decided.
func (s *Slack) Handler(v Voter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, SlackMaxBody))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "cannot read request body", http.StatusBadRequest)
			return
		}
		if err := VerifySlack(s.cfg.SigningSecret, r.Header, body, s.now()); err != nil {
			s.log.Warn("slack interaction refused", "err", err, "remote", r.RemoteAddr)
			http.Error(w, "invalid signature", http.StatusUnauthorized)
			return
		}
		first, err := s.store.Claim(r.Context(), "slack:"+r.Header.Get("X-Slack-Signature"), slackReplayTTL)
		if err != nil {
			s.log.Error("slack interaction: replay guard", "err", err)
			http.Error(w, "cannot record delivery", http.StatusServiceUnavailable)
			return
		}
		if !first {
			s.log.Info("slack interaction refused: duplicate delivery")
			writeEphemeral(w, "This button press was already handled.")
			return
		}
		in, err := parseInteraction(body)
		if err != nil {
			s.log.Warn("slack interaction unreadable", "err", err)
			http.Error(w, "malformed interaction payload", http.StatusBadRequest)
			return
		}
		text := s.interact(r.Context(), v, in)
		if text == "" {
			w.WriteHeader(http.StatusOK)
			return
		}
		writeEphemeral(w, text)
		s.followUp(r.Context(), in.ResponseURL, text)
	})
}

// interact casts the vote in, returning the text for the presser (empty
// for an interaction that is not a vote).
func (s *Slack) interact(ctx context.Context, v Voter, in *interaction) string {
	if in.Type != "block_actions" || len(in.Actions) == 0 {
		s.log.Info("slack interaction ignored", "type", in.Type)
		return ""
	}
	act := in.Actions[0]
	if act.ActionID != slackActionApprove && act.ActionID != slackActionDeny {
		s.log.Info("slack interaction ignored", "type", in.Type, "action_id", act.ActionID)
		return ""
	}
	user, ok := s.people.Slack(in.User.ID)
	if !ok {
		s.log.Warn("slack vote refused: user not mapped", "slack_user", in.User.ID, "approval_id", act.Value)
		return "You are not an approver: your Slack user is not mapped to one in gatekeeper's config."
	}
	vote := Vote{
		Approver:   user.Name,
		Roles:      user.Roles,
		Approve:    act.ActionID == slackActionApprove,
		Via:        ViaSlack,
		Credential: user.Credential,
		At:         s.now(),
		Tenants:    user.Tenants,
	}
	vctx, cancel := context.WithTimeout(ctx, slackVoteTime)
	defer cancel()
	req, err := v.Vote(vctx, act.Value, vote)
	log := s.log.With("approval_id", act.Value, "approver", user.Name, "approve", vote.Approve)
	switch {
	case err == nil:
		log.Info("slack vote cast", "state", req.State)
		return voteOutcome(req, vote.Approve)
	case errors.Is(err, ErrNotApprover):
		log.Info("slack vote refused", "err", err)
		return "You are not an approver of this request's gate: none of your roles is one it requires."
	case errors.Is(err, ErrAlreadyVoted):
		return "You have already voted on this request (here or through the admin API)."
	case errors.Is(err, ErrExpired):
		return "This request has expired: the call was not delivered."
	case errors.Is(err, ErrDecided):
		return "This request is already decided."
	case errors.Is(err, ErrNotFound):
		return "No such approval request."
	case errors.Is(err, context.DeadlineExceeded):
		log.Warn("slack vote timed out", "err", err)
		return "Your vote may not have been recorded in time: check the message, and press again if it is still pending."
	default:
		log.Error("slack vote failed", "err", err)
		return "Your vote could not be recorded: press again in a moment."
	}
}

// voteOutcome tells the presser what their vote did.
func voteOutcome(r *Request, approve bool) string {
	if r == nil {
		return "Your vote was recorded."
	}
	switch r.State {
	case Approved:
		return "You approved " + r.ID + ": the request is approved."
	case Denied:
		return "You denied " + r.ID + ": the call will not be delivered."
	case Pending:
		return fmt.Sprintf("Your approval of %s is recorded (%d of %d).", r.ID, r.Approving(), max(r.Quorum, 1))
	}
	if approve {
		return "Your approval was recorded; the request is " + string(r.State) + "."
	}
	return "Your denial was recorded; the request is " + string(r.State) + "."
}

// ephemeral is the answer that only the presser sees.
type ephemeral struct {
	ResponseType    string `json:"response_type"`
	ReplaceOriginal bool   `json:"replace_original"`
	Text            string `json:"text"`
}

func writeEphemeral(w http.ResponseWriter, text string) {
	body, _ := json.Marshal(ephemeral{ResponseType: "ephemeral", Text: text}) // cannot fail: strings only
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
	// Slack has its answer; the follow-up below must not hold it.
	_ = http.NewResponseController(w).Flush()
}

// followUp also posts the outcome to the interaction's response_url:
// Slack shows a block_actions acknowledgement's body only in some clients.
// Only Slack's own hosts (or the configured API's, for tests against a
// local stand-in) are posted to, so a payload cannot aim gatekeeper
// elsewhere.
func (s *Slack) followUp(ctx context.Context, responseURL, text string) {
	if responseURL == "" || !s.slackHost(responseURL) {
		return
	}
	body, _ := json.Marshal(ephemeral{ResponseType: "ephemeral", Text: text})
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), slackFollowUpTime)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, responseURL, bytes.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	resp, err := s.client.Do(req)
	if err != nil {
		s.log.Warn("slack response_url post failed", "err", redactURLError(err))
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, slackMaxReply))
	resp.Body.Close()
}

// slackHost reports whether u is an https URL on hooks.slack.com, or on
// the configured API's scheme and host.
func (s *Slack) slackHost(u string) bool {
	pu, err := url.Parse(u)
	if err != nil {
		return false
	}
	if pu.Scheme == "https" && pu.Host == "hooks.slack.com" {
		return true
	}
	api, err := url.Parse(s.apiURL)
	return err == nil && pu.Scheme == api.Scheme && pu.Host == api.Host
}

// redactURLError drops the URL from a client error: a response_url is a
// bearer capability for the message.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
