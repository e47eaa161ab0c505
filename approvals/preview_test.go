package approvals

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestVisible(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{"plain ASCII", `rm -rf "/tmp/x"`, `rm -rf "/tmp/x"`},
		{"letters, accents, CJK, emoji", "café 東京 Ωmega 😀", "café 東京 Ωmega 😀"},
		{"right-to-left override", "ls \u202eexe.txt", `ls \u202eexe.txt`},
		{"embeddings and pop", "\u202a\u202b\u202c\u202d", `\u202a\u202b\u202c\u202d`},
		{"isolates", "a\u2066b\u2067c\u2068d\u2069e", `a\u2066b\u2067c\u2068d\u2069e`},
		{"zero-width and marks", "r\u200bm\u200c \u200d-\u200e-\u200frf", `r\u200bm\u200c \u200d-\u200e-\u200frf`},
		{"word joiner and BOM", "\u2060x\ufeff", `\u2060x\ufeff`},
		{"tag characters", "ok\U000e0072\U000e006d", `ok\U000e0072\U000e006d`},
		{"controls", "a\nb\tc\rd\x1b[2Je\x7f", `a\nb\tc\rd\u001b[2Je\u007f`},
		{"C1 control", "a\u0085b", `a\u0085b`},
		{"soft hyphen and Arabic letter mark", "r\u00adm\u061c", `r\u00adm\u061c`},
		{"odd spaces", "rm\u00a0-rf\u3000/\u2028", `rm\u00a0-rf\u3000/\u2028`},
		{"variation selector and fillers", "a\ufe0fb\u3164c\u2800", `a\ufe0fb\u3164c\u2800`},
		{"private use", "\ue000", `\ue000`},
		{"invalid UTF-8", "a\xffb", `a\xffb`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Visible(c.in)
			if got != c.want {
				t.Errorf("Visible(%q) = %q, want %q", c.in, got, c.want)
			}
			if n := CountInvisible(got); n != 0 {
				t.Errorf("Visible(%q) still holds %d invisible characters", c.in, n)
			}
			if (c.in != c.want) != (CountInvisible(c.in) > 0) {
				t.Errorf("CountInvisible(%q) = %d, disagrees with Visible", c.in, CountInvisible(c.in))
			}
		})
	}
}

func TestExcerpt(t *testing.T) {
	cases := []struct {
		name  string
		in    string
		limit int
	}{
		{"fits", "short", 10},
		{"exact", strings.Repeat("x", 40), 40},
		{"long ASCII", strings.Repeat("a", 1000) + "; rm -rf /", 100},
		{"long multibyte", strings.Repeat("é", 800) + "東京", 120},
		{"long with invisible", strings.Repeat("\u202e", 300) + "tail", 200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Excerpt(c.in, c.limit, nil)
			if n := utf8.RuneCountInString(got); n > c.limit {
				t.Errorf("excerpt has %d characters, over %d", n, c.limit)
			}
			if CountInvisible(got) != 0 {
				t.Errorf("excerpt %q holds invisible characters", got)
			}
			if v := Visible(c.in); utf8.RuneCountInString(v) <= c.limit {
				if got != v {
					t.Errorf("a text that fits was changed: %q", got)
				}
				return
			}
			head, rest, ok := strings.Cut(got, " …[")
			count, tail, ok2 := strings.Cut(rest, " characters elided]… ")
			if !ok || !ok2 {
				t.Fatalf("excerpt %q states no elision", got)
			}
			var elided int
			if err := json.Unmarshal([]byte(strings.ReplaceAll(count, ",", "")), &elided); err != nil {
				t.Fatalf("elided count %q: %v", count, err)
			}
			kept := []rune(c.in)
			// The head and the tail are the text's own first and last
			// characters (escaped), and with the elided ones they make
			// up the whole.
			var h, tl int
			for h = 0; h < len(kept) && strings.HasPrefix(head, Visible(string(kept[:h+1]))); h++ {
			}
			for tl = 0; tl < len(kept) && strings.HasSuffix(tail, Visible(string(kept[len(kept)-tl-1:]))); tl++ {
			}
			if Visible(string(kept[:h])) != head || Visible(string(kept[len(kept)-tl:])) != tail {
				t.Errorf("head %q or tail %q is not the text's own", head, tail)
			}
			if h+tl+elided != len(kept) {
				t.Errorf("head %d + tail %d + elided %d != %d characters", h, tl, elided, len(kept))
			}
			if h == 0 || tl == 0 {
				t.Errorf("excerpt %q lacks a head or a tail", got)
			}
		})
	}
}

// A 5,000-character call whose dangerous part comes last: the preview
// shows that part, and says how much it leaves out.
func TestPreviewLongCallShowsItsEnd(t *testing.T) {
	cmd := "echo harmless-" + strings.Repeat("a", 4970) + "; rm -rf /"
	args, _ := json.Marshal(map[string]string{"command": cmd})
	call, err := Canonical("Bash", args)
	if err != nil {
		t.Fatal(err)
	}
	if n := utf8.RuneCount(call.Input); n < 5000 {
		t.Fatalf("call is %d characters", n)
	}
	p := Preview(call)
	if n := utf8.RuneCountInString(p); n > MaxPreview {
		t.Errorf("preview has %d characters, over %d", n, MaxPreview)
	}
	if !strings.HasPrefix(p, `Bash {"command":"echo harmless-aaa`) {
		t.Errorf("preview starts %q", p[:40])
	}
	if !strings.HasSuffix(p, `aaaa; rm -rf /"}`) {
		t.Errorf("preview ends %q, want the call's end", p[len(p)-40:])
	}
	if !strings.Contains(p, " characters elided]… ") {
		t.Errorf("preview %q does not state the elision", p)
	}
}

func FuzzExcerpt(f *testing.F) {
	f.Add("rm -rf /", 20)
	f.Add(strings.Repeat("a\u202e", 100), 50)
	f.Add("\xff\xfe\x00\u2066", 3)
	f.Add(strings.Repeat("<&`", 200), 300)
	f.Fuzz(func(t *testing.T, s string, limit int) {
		if limit < 0 || limit > 10000 {
			return
		}
		for _, width := range []func(string) int{nil, mrkdwnWidth} {
			got := Excerpt(s, limit, width)
			w := utf8.RuneCountInString
			if width != nil {
				w = width
			}
			if w(got) > max(limit, w(strings.TrimSpace(elision(utf8.RuneCountInString(s))))) {
				t.Fatalf("Excerpt(%q, %d) = %q is too wide", s, limit, got)
			}
			if CountInvisible(got) != 0 || !utf8.ValidString(got) {
				t.Fatalf("Excerpt(%q, %d) = %q holds invisible characters", s, limit, got)
			}
		}
	})
}
