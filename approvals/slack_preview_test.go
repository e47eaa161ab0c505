package approvals

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// blockText returns the text of the block with id, or of its first
// context element.
func blockText(msg slackMessage, id string) (string, bool) {
	for _, b := range msg.Blocks {
		if b.BlockID != id {
			continue
		}
		if b.Text != nil {
			return b.Text.Text, true
		}
		if len(b.Elements) > 0 {
			if e, ok := b.Elements[0].(slackText); ok {
				return e.Text, true
			}
		}
	}
	return "", false
}

// A 5,000-character call whose dangerous part comes last: Slack's blocks
// show its head, the elided length and its end, the part the gate's
// condition matched, and where the whole call is.
func TestSlackMessageLongCallShowsTheDangerousEnd(t *testing.T) {
	api := newSlackAPI(t)
	s := newChanSlack(t, api, newChanStore(t), &chanWaits{})
	g := compile(t, gate("destructive-shell", destructive))
	gt, _ := g.Lookup("destructive-shell")
	cmd := "echo harmless-" + strings.Repeat("a", 4970) + "; rm -rf /"
	arg, _ := json.Marshal(map[string]string{"command": cmd})
	call, err := Canonical("Bash", arg)
	if err != nil {
		t.Fatal(err)
	}
	r := gt.Request("apr_long", call, destructive, chanNow)
	msg := s.message(r, "")

	callText, _ := blockText(msg, "call")
	if n := utf8.RuneCountInString(callText); n > slackSectionMax {
		t.Errorf("call section is %d characters, over Slack's %d", n, slackSectionMax)
	}
	if !strings.Contains(callText, "echo harmless-aaa") || !strings.HasSuffix(callText, "aaa; rm -rf /\"}```") {
		t.Errorf("call section does not show the call's head and end: %q…%q", callText[:60], callText[len(callText)-60:])
	}
	if !strings.Contains(callText, " characters elided]… ") {
		t.Error("call section does not state the elision")
	}
	matched, ok := blockText(msg, "matched")
	if !ok || !strings.Contains(matched, "aaa; ⟦rm -rf⟧ /") || !strings.Contains(matched, "at character 4,986 of 4,994") {
		t.Errorf("matched section = %q", matched)
	}
	if n := utf8.RuneCountInString(matched); n > slackSectionMax {
		t.Errorf("matched section is %d characters", n)
	}
	if digest, _ := blockText(msg, "digest"); !strings.Contains(digest, "gatekeeper approvals show apr_long") {
		t.Errorf("digest line %q does not say where the whole call is", digest)
	}
}

// Bidirectional controls, isolates and zero-width characters in a call
// reach Slack only as visible escapes, and the message warns of them.
func TestSlackMessageMakesInvisibleCharactersVisible(t *testing.T) {
	api := newSlackAPI(t)
	s := newChanSlack(t, api, newChanStore(t), &chanWaits{})
	hidden := []rune{0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2066, 0x2067, 0x2068, 0x2069,
		0x200b, 0x200c, 0x200d, 0x200e, 0x200f, 0x2060, 0xfeff, 0xe0041, 0x1b}
	var cmd strings.Builder
	cmd.WriteString("ls ")
	for _, r := range hidden {
		cmd.WriteRune(r)
		cmd.WriteString("x")
	}
	arg, _ := json.Marshal(map[string]string{"command": cmd.String()})
	call, err := Canonical("Bash\u202e", arg)
	if err != nil {
		t.Fatal(err)
	}
	// 18 of them: the escape character is already \u001b in the canonical
	// form, and the name holds one.
	r := chanRequest(t, "apr_bidi")
	r.Call, r.Trajectory, r.Why = call, "run\u2066-1", "evaluation error: no such key \u202ezz"
	r.Votes = []Vote{{Approver: "carol", Approve: false, Reason: "no\u200b", Via: ViaAdmin}}
	r.State = Denied
	body, err := json.Marshal(s.message(r, ""))
	if err != nil {
		t.Fatal(err)
	}
	var decoded any
	if err := json.Unmarshal(body, &decoded); err != nil {
		t.Fatal(err)
	}
	plain, _ := json.Marshal(decoded) // the text as Slack reads it
	for _, r := range hidden {
		if strings.ContainsRune(string(body), r) || strings.ContainsRune(string(plain), r) {
			t.Errorf("U+%04X reaches Slack unescaped", r)
		}
	}
	for _, want := range []string{`\\u202e`, `\\u2066`, `\\u2069`, `\\u200b`, `\\ufeff`, `\\U000e0041`, `\\u001b`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("message lacks the visible escape %s", want)
		}
	}
	msg := s.message(r, "")
	if w, ok := blockText(msg, "invisible"); !ok || !strings.Contains(w, "18 invisible or bidirectional control characters") {
		t.Errorf("warning = %q, %v", w, ok)
	}
}

// However many and however escaped the matched parts, their section fits
// Slack's limit and says how many it leaves for approvals show.
func TestSlackMatchedSectionFits(t *testing.T) {
	amp := strings.Repeat("&<>", 200)
	var ms []Match
	for range maxMatches {
		ms = append(ms, Match{Where: strings.Repeat("w", 400), Before: amp[:60], Text: Excerpt(amp, matchMaxText, nil), After: amp[:60], At: 1, Of: 2})
	}
	text := matchedSection(ms)
	if n := utf8.RuneCountInString(text); n > slackSectionMax {
		t.Errorf("matched section is %d characters, over %d", n, slackSectionMax)
	}
	if !strings.HasSuffix(text, "and 3 more in `gatekeeper approvals show`") {
		t.Errorf("section ends %q", text[len(text)-60:])
	}
	if strings.Count(text, "```") != 2*slackShownMatches {
		t.Errorf("want %d code blocks:\n%s", slackShownMatches, text)
	}
}
