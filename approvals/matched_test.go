package approvals

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestGateRequestMatched(t *testing.T) {
	long := "echo harmless-" + strings.Repeat("a", 4970) + "; rm -rf /"
	cases := []struct {
		name, when, command string
		want                []string // Text of each match, in order
		wantWhere           string
	}{
		{"regex span at the end", destructive, long, []string{"rm -rf"}, `tool.input.command.matches("rm -rf|DROP TABLE|kubectl delete")`},
		{"every span, at most three", `tool.input.command.matches("rm")`, "rm a; rm b; rm c; rm d", []string{"rm", "rm", "rm"}, ""},
		{"contains", `tool.input.command.contains("DROP")`, "psql -c 'DROP TABLE x'", []string{"DROP"}, ""},
		{"startsWith and endsWith", `tool.input.command.startsWith("sudo") && tool.input.command.endsWith("/")`, "sudo rm -rf /", []string{"sudo", "/"}, ""},
		{"on a derived string", `tool.input.command.lowerAscii().matches("drop\\s+table")`, "DROP  TABLE users", []string{"drop  table"}, ""},
		{"global matches", `matches(tool.input.command, "kubectl delete")`, "kubectl delete ns prod", []string{"kubectl delete"}, ""},
		{"a test that did not match shows nothing", `tool.input.command.matches("rm") || tool.input.command.contains("zzz")`, "rm x", []string{"rm"}, ""},
		{"a test on the name only is not a part of the input", `tool.name.matches("Bash")`, "ls", nil, ""},
		{"a test inside a comprehension is left out", `["rm", "dd"].exists(c, tool.input.command.startsWith(c))`, "rm -rf /", nil, ""},
		{"no string test", `tool.name == "Bash"`, "ls", nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := compile(t, gate("g", c.when))
			gt, _ := g.Lookup("g")
			args, _ := json.Marshal(map[string]string{"command": c.command})
			call, err := Canonical("Bash", args)
			if err != nil {
				t.Fatal(err)
			}
			r := gt.Request("apr_1", call, c.when, t0)
			var got []string
			for _, m := range r.Matched {
				got = append(got, m.Text)
				if m.Of != utf8.RuneCountInString(c.command) && !strings.Contains(m.Where, "lowerAscii") {
					t.Errorf("match %+v: Of is not the command's length %d", m, utf8.RuneCountInString(c.command))
				}
			}
			if strings.Join(got, "|") != strings.Join(c.want, "|") {
				t.Fatalf("matched %q, want %q", got, c.want)
			}
			if c.wantWhere != "" && r.Matched[0].Where != c.wantWhere {
				t.Errorf("where = %q, want %q", r.Matched[0].Where, c.wantWhere)
			}
		})
	}
}

func TestMatchedContext(t *testing.T) {
	g := compile(t, gate("g", destructive))
	gt, _ := g.Lookup("g")
	cmd := "echo harmless-" + strings.Repeat("a", 4970) + "; rm -rf /\u202e"
	args, _ := json.Marshal(map[string]string{"command": cmd})
	call, err := Canonical("Bash", args)
	if err != nil {
		t.Fatal(err)
	}
	r := gt.Request("apr_1", call, destructive, t0)
	if len(r.Matched) != 1 {
		t.Fatalf("matched %+v", r.Matched)
	}
	m := r.Matched[0]
	if m.Before != "…"+strings.Repeat("a", matchContext-2)+"; " || m.After != ` /\u202e` {
		t.Errorf("context %q ⟦%s⟧ %q", m.Before, m.Text, m.After)
	}
	if m.At != strings.Index(cmd, "rm -rf") { // all ASCII before it: bytes are characters
		t.Errorf("at = %d, want %d", m.At, strings.Index(cmd, "rm -rf"))
	}
	if r.Invisible != 1 {
		t.Errorf("invisible = %d, want 1", r.Invisible)
	}
}
