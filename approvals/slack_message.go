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
// wrote is escaped, so no call can mention @channel or forge a link, and
// every invisible character is written as an escape (see Visible). A call
// too long for its block shows its head and its tail with the elided
// length stated, then the parts the gate's condition matched, and the
// message says where the whole call is. A pending request gets the
// buttons; a decided one gets its outcome instead.
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
	header := slackText{Type: "plain_text", Text: Excerpt(title+r.Call.Name, slackHeaderMax, nil)}

	callHead := "*Call* `" + escapeCode(Excerpt(r.Call.Name, 200, nil), 250) + "`\n"
	call := callHead + fenceExcerpt(string(r.Call.Input), slackSectionMax-utf8.RuneCountInString(callHead))

	fields := []slackText{
		mrkdwn("*Gate*\n" + escapeMrkdwn(Excerpt(r.Gate, 500, nil))),
		mrkdwn("*Trajectory*\n`" + escapeCode(Excerpt(r.Trajectory, 500, nil), 600) + "`"),
		mrkdwn("*Tenant*\n" + escapeMrkdwn(Excerpt(r.Tenant, 500, nil))),
		mrkdwn(fmt.Sprintf("*Budget used*\n%.1f%%", r.Observed.BudgetUsed*100)),
		mrkdwn("*Expires*\n" + slackDate(r.ExpiresAt)),
		mrkdwn("*Approvers*\n" + escapeMrkdwn(Excerpt(approversLine(r), slackFieldMax-20, nil))),
	}
	whyHead := "*Why*\n"
	why := whyHead + fenceExcerpt(r.Why, slackSectionMax-len(whyHead))

	blocks := []slackBlock{
		{Type: "header", Text: &header},
		{Type: "section", BlockID: "call", Text: &slackText{Type: "mrkdwn", Text: call}},
	}
	if n := CountInvisible(r.Call.Name) + CountInvisible(string(r.Call.Input)); n > 0 {
		blocks = append(blocks, slackBlock{Type: "context", BlockID: "invisible", Elements: []any{
			mrkdwn(fmt.Sprintf(":warning: This call holds %s invisible or bidirectional control character%s, "+
				"shown above as \\u escapes: what a terminal or editor displays of it may differ from what runs.",
				groupDigits(n), plural(n))),
		}})
	}
	if m := matchedSection(r.Matched); m != "" {
		blocks = append(blocks, slackBlock{Type: "section", BlockID: "matched", Text: &slackText{Type: "mrkdwn", Text: m}})
	}
	blocks = append(blocks,
		slackBlock{Type: "section", BlockID: "facts", Fields: fields},
		slackBlock{Type: "section", BlockID: "why", Text: &slackText{Type: "mrkdwn", Text: why}},
		slackBlock{Type: "context", BlockID: "digest", Elements: []any{
			mrkdwn("request `" + escapeCode(r.ID, 200) + "` · digest `" + escapeCode(r.Digest, 200) +
				"` · the whole call: `gatekeeper approvals show " + escapeCode(r.ID, 200) + "`"),
		}},
	)
	if r.State == Pending {
		blocks = append(blocks, slackBlock{Type: "actions", BlockID: "vote", Elements: []any{
			slackButton{Type: "button", Text: slackText{Type: "plain_text", Text: "Approve"},
				ActionID: slackActionApprove, Value: r.ID, Style: "primary"},
			slackButton{Type: "button", Text: slackText{Type: "plain_text", Text: "Deny"},
				ActionID: slackActionDeny, Value: r.ID, Style: "danger"},
		}})
	} else {
		blocks = append(blocks, slackBlock{Type: "context", BlockID: "outcome", Elements: []any{
			mrkdwn(escapeMrkdwn(Excerpt(outcomeLine(r), slackSectionMax, mrkdwnWidth))),
		}})
	}

	text := fmt.Sprintf("%s%s call in trajectory %s (gate %s), expires %s",
		title, r.Call.Name, r.Trajectory, r.Gate, r.ExpiresAt.UTC().Format(time.RFC3339))
	return slackMessage{
		Channel: s.messageChannel(r),
		TS:      ts,
		Text:    escapeMrkdwn(Excerpt(text, slackTextMax, mrkdwnWidth)),
		Blocks:  blocks,
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// slackShownMatches bounds the matched parts in one message.
const slackShownMatches = 3

// matchedSection shows the parts of the call the gate's condition
// matched, each with its test and its place in the value, the match
// itself between ⟦ and ⟧. Empty when there are none.
func matchedSection(ms []Match) string {
	if len(ms) == 0 {
		return ""
	}
	const head = "*Matched by the gate's condition*\n"
	shown := ms[:min(len(ms), slackShownMatches)]
	budget := (slackSectionMax - len(head) - 60) / len(shown) // 60: the "and N more" line
	var b strings.Builder
	b.WriteString(head)
	for _, m := range shown {
		where := fmt.Sprintf("`%s` at character %s of %s\n", escapeCode(m.Where, 300), groupDigits(m.At), groupDigits(m.Of))
		body := m.Before + "⟦" + m.Text + "⟧" + m.After
		room := budget - utf8.RuneCountInString(where) - 6
		if mrkdwnWidth(body) > room {
			body = "…⟦" + m.Text + "⟧…"
		}
		b.WriteString(where)
		b.WriteString(fence(body, room))
		b.WriteString("\n")
	}
	if n := len(ms) - len(shown); n > 0 {
		fmt.Fprintf(&b, "and %d more in `gatekeeper approvals show`", n)
	}
	return strings.TrimSuffix(b.String(), "\n")
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

// mrkdwnWidth is how many characters s takes in a code block once
// escaped: each backtick counts twice, more than breaking up a "```"
// adds, so a budgeted text always fits.
func mrkdwnWidth(s string) int {
	return utf8.RuneCountInString(escapeMrkdwn(s)) + strings.Count(s, "`")
}

// escapeCode escapes s for inline code: also no backtick, which would end it.
func escapeCode(s string, limit int) string {
	return escapeMrkdwn(strings.ReplaceAll(truncate(Visible(s), limit), "`", "'"))
}

// fenceExcerpt puts s in a code block of at most limit characters: whole
// when it fits, else its head and its tail around the stated elision
// (see Excerpt), invisible characters escaped.
func fenceExcerpt(s string, limit int) string {
	return fence(Excerpt(s, limit-6, mrkdwnWidth), limit)
}

// fence puts s in a code block of at most limit characters (escaped), cut
// with "…" when it does not fit. A "```" inside s is broken up so it
// cannot close the block early.
func fence(s string, limit int) string {
	const open, closing, cut = "```", "```", "…"
	budget := limit - len(open) - len(closing)
	s = strings.ReplaceAll(Visible(s), "```", "`\u200b`\u200b`")
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
