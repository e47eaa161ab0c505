package approvals

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Slack's limits on Block Kit text, in characters.
const (
	slackSectionMax = 3000
	slackFieldMax   = 2000
	slackHeaderMax  = 150
	slackTextMax    = 3000 // the top-level fallback text, kept short anyway
)

// Action ids of the two buttons; their value is the request id and
// nothing else, so a press carries no fact a person could have altered.
const (
	slackActionApprove = "approve"
	slackActionDeny    = "deny"
)

// slackMessage is the body of chat.postMessage (TS empty) and chat.update.
type slackMessage struct {
	Channel string       `json:"channel"`
	TS      string       `json:"ts,omitempty"`
	Text    string       `json:"text"`
	Blocks  []slackBlock `json:"blocks"`
}

type slackBlock struct {
	Type     string      `json:"type"`
	BlockID  string      `json:"block_id,omitempty"`
	Text     *slackText  `json:"text,omitempty"`
	Fields   []slackText `json:"fields,omitempty"`
	Elements []any       `json:"elements,omitempty"` // slackText (context) or slackButton (actions)
}

type slackText struct {
	Type string `json:"type"` // "plain_text" | "mrkdwn"
	Text string `json:"text"`
}

type slackButton struct {
	Type     string    `json:"type"` // "button"
	Text     slackText `json:"text"`
	ActionID string    `json:"action_id"`
	Value    string    `json:"value"`
	Style    string    `json:"style,omitempty"`
}

func mrkdwn(s string) slackText { return slackText{Type: "mrkdwn", Text: s} }

// message renders r for Slack. Everything a tool call or a gate author
// wrote is escaped, so no call can mention @channel or forge a link. A
// pending request gets the buttons; a decided one gets its outcome instead.
func (s *Slack) message(r *Request, ts string) slackMessage {
	title := "Approval needed: "
	switch r.State {
	case Approved:
		title = "Approved: "
	case Denied:
		title = "Denied: "
	case Expired:
		title = "Expired: "
	case Stale:
		title = "Stale: "
	case Withdrawn:
		title = "Withdrawn: "
	}
	header := slackText{Type: "plain_text", Text: truncate(title+r.Call.Name, slackHeaderMax)}

	callHead := "*Call* `" + escapeCode(r.Call.Name, 200) + "`\n"
	call := callHead + fence(string(r.Call.Input), slackSectionMax-utf8.RuneCountInString(callHead))

	fields := []slackText{
		mrkdwn("*Gate*\n" + escapeMrkdwn(truncate(r.Gate, 500))),
		mrkdwn("*Trajectory*\n`" + escapeCode(r.Trajectory, 500) + "`"),
		mrkdwn("*Tenant*\n" + escapeMrkdwn(truncate(r.Tenant, 500))),
		mrkdwn(fmt.Sprintf("*Budget used*\n%.1f%%", r.Observed.BudgetUsed*100)),
		mrkdwn("*Expires*\n" + slackDate(r.ExpiresAt)),
		mrkdwn("*Approvers*\n" + escapeMrkdwn(truncate(approversLine(r), slackFieldMax-20))),
	}
	whyHead := "*Why*\n"
	why := whyHead + fence(r.Why, slackSectionMax-len(whyHead))

	blocks := []slackBlock{
		{Type: "header", Text: &header},
		{Type: "section", BlockID: "call", Text: &slackText{Type: "mrkdwn", Text: call}},
		{Type: "section", BlockID: "facts", Fields: fields},
		{Type: "section", BlockID: "why", Text: &slackText{Type: "mrkdwn", Text: why}},
		{Type: "context", BlockID: "digest", Elements: []any{
			mrkdwn("request `" + escapeCode(r.ID, 200) + "` · digest `" + escapeCode(r.Digest, 200) + "`"),
		}},
	}
	if r.State == Pending {
		blocks = append(blocks, slackBlock{Type: "actions", BlockID: "vote", Elements: []any{
			slackButton{Type: "button", Text: slackText{Type: "plain_text", Text: "Approve"},
				ActionID: slackActionApprove, Value: r.ID, Style: "primary"},
			slackButton{Type: "button", Text: slackText{Type: "plain_text", Text: "Deny"},
				ActionID: slackActionDeny, Value: r.ID, Style: "danger"},
		}})
	} else {
		blocks = append(blocks, slackBlock{Type: "context", BlockID: "outcome", Elements: []any{
			mrkdwn(escapeMrkdwn(truncate(outcomeLine(r), slackSectionMax))),
		}})
	}

	text := fmt.Sprintf("%s%s call in trajectory %s (gate %s), expires %s",
		title, r.Call.Name, r.Trajectory, r.Gate, r.ExpiresAt.UTC().Format(time.RFC3339))
	return slackMessage{
		Channel: s.messageChannel(r),
		TS:      ts,
		Text:    escapeMrkdwn(truncate(text, slackTextMax)),
		Blocks:  blocks,
	}
}

// messageChannel is where r's message is: the channel Slack answered with
// when it was posted (an id even when config names the channel), else
// config's.
func (s *Slack) messageChannel(r *Request) string {
	if c := r.Channels[SlackChannelKey]; c != "" {
		return c
	}
	return s.cfg.Channel
}

// approversLine says who may decide: "2 of secops, sre (distinct roles)".
func approversLine(r *Request) string {
	q := r.Quorum
	if q < 1 {
		q = 1
	}
	line := fmt.Sprintf("%d of %s", q, strings.Join(r.Roles, ", "))
	if r.DistinctRoles {
		line += " (distinct roles)"
	}
	return line
}

// outcomeLine is the context line that replaces the buttons.
func outcomeLine(r *Request) string {
	var approvers, deniers []string
	var denyReason string
	for _, v := range r.Votes {
		if v.Approve {
			approvers = append(approvers, v.Approver)
		} else {
			deniers = append(deniers, v.Approver)
			if denyReason == "" {
				denyReason = v.Reason
			}
		}
	}
	switch r.State {
	case Approved:
		return "Approved by " + strings.Join(approvers, ", ")
	case Denied:
		if len(deniers) == 0 {
			return withReason("Denied", r.Reason)
		}
		if denyReason == "" {
			denyReason = r.Reason
		}
		return withReason("Denied by "+strings.Join(deniers, ", "), denyReason)
	case Expired:
		if len(approvers) > 0 {
			return "Expired with no decision (approved by " + strings.Join(approvers, ", ") + ", short of the quorum)"
		}
		return "Expired with no decision"
	case Stale:
		return withReason("Stale", r.Reason)
	case Withdrawn:
		return withReason("Withdrawn", r.Reason)
	}
	return string(r.State)
}

func withReason(s, reason string) string {
	if reason == "" {
		return s
	}
	return s + ": " + reason
}

// slackDate renders t in each reader's own time zone, with a UTC fallback
// for clients that cannot.
func slackDate(t time.Time) string {
	return fmt.Sprintf("<!date^%d^{date_short_pretty} {time}|%s>", t.Unix(), t.UTC().Format(time.RFC3339))
}

// escapeMrkdwn escapes the three characters Slack gives meaning to in any
// text: a tool call cannot write <!channel> or a <url|label> link.
func escapeMrkdwn(s string) string {
	return mrkdwnEscaper.Replace(s)
}

var mrkdwnEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// escapeCode escapes s for inline code: also no backtick, which would end it.
func escapeCode(s string, limit int) string {
	return escapeMrkdwn(strings.ReplaceAll(truncate(s, limit), "`", "'"))
}

// fence puts s in a code block of at most limit characters (escaped), cut
// with "…" when it does not fit. A "```" inside s is broken up so it
// cannot close the block early.
func fence(s string, limit int) string {
	const open, closing, cut = "```", "```", "…"
	budget := limit - len(open) - len(closing)
	s = strings.ReplaceAll(s, "```", "`\u200b`\u200b`")
	var b strings.Builder
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		piece := escapeMrkdwn(string(r))
		w := utf8.RuneCountInString(piece)
		reserve := 0
		if i < len(s) {
			reserve = 1 // room for the cut mark
		}
		if n+w+reserve > budget {
			b.WriteString(cut)
			break
		}
		b.WriteString(piece)
		n += w
	}
	return open + b.String() + closing
}

// truncate cuts s to at most limit characters, ending in "…" when cut.
func truncate(s string, limit int) string {
	if utf8.RuneCountInString(s) <= limit {
		return s
	}
	if limit < 1 {
		return ""
	}
	runes := []rune(s)
	return string(runes[:limit-1]) + "…"
}
