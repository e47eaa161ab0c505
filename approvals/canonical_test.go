package approvals

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestCanonical(t *testing.T) {
	tests := []struct {
		name, args, want string
	}{
		{"sorted keys", `{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{"nested and whitespace", "{ \"z\" : [ 1 , {\"y\":true, \"x\":null} ], \"a\":\"s\" }", `{"a":"s","z":[1,{"x":null,"y":true}]}`},
		{"numbers as written", `{"n":1.50,"m":1e3,"k":-0}`, `{"k":-0,"m":1e3,"n":1.50}`},
		{"escapes normalized", `{"c":"\u0041\/\u00e9<&>"}`, `{"c":"A/é<&>"}`},
		{"control characters", `{"c":"a\nb\u0001"}`, `{"c":"a\nb\u0001"}`},
		{"empty args", ``, `{}`},
		{"scalar", `"rm -rf /"`, `"rm -rf /"`},
		{"empty containers", `{"a":{},"b":[]}`, `{"a":{},"b":[]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Canonical("Bash", []byte(tt.args))
			if err != nil {
				t.Fatal(err)
			}
			if string(c.Input) != tt.want {
				t.Errorf("Canonical(%s) = %s, want %s", tt.args, c.Input, tt.want)
			}
		})
	}
}

func TestCanonicalRejects(t *testing.T) {
	tests := []struct{ name, args string }{
		{"not JSON", `{"a":`},
		{"trailing data", `{"a":1} {"b":2}`},
		{"duplicate key", `{"a":1,"a":2}`},
		{"duplicate key nested", `{"x":{"a":1,"b":0,"a":2}}`},
		{"case variant", `{"command":"ls","Command":"rm -rf /"}`},
		{"case variant apart", `{"Command":"rm","b":0,"command":"ls"}`},
		{"case variant nested", `{"x":[{"path":"a","PATH":"b"}]}`},
		{"kelvin sign", "{\"kind\":1,\"\u212aind\":2}"},
		{"long s", "{\"s\":1,\"\u017f\":2}"},
		{"too deep", strings.Repeat("[", MaxDepth+2) + strings.Repeat("]", MaxDepth+2)},
		{"invalid UTF-8", "{\"a\":\"\xff\"}"},
		{"bare word", `rm`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Canonical("Bash", []byte(tt.args))
			if !errors.Is(err, ErrInvalidArgs) {
				t.Fatalf("err = %v, want ErrInvalidArgs", err)
			}
			if repeated := strings.Contains(tt.name, "duplicate") || strings.Contains(tt.name, "case") ||
				strings.Contains(tt.name, "sign") || strings.Contains(tt.name, "long s"); repeated != errors.Is(err, ErrRepeatedKey) {
				t.Fatalf("err = %v: ErrRepeatedKey %v, want %v", err, errors.Is(err, ErrRepeatedKey), repeated)
			}
		})
	}
}

func TestDigest(t *testing.T) {
	a, _ := Canonical("Bash", []byte(`{"command":"ls","timeout":10}`))
	b, _ := Canonical("Bash", []byte("{\"timeout\":10,\n \"command\":\"ls\"}"))
	c, _ := Canonical("Bash", []byte(`{"command":"ls -a","timeout":10}`))
	d, _ := Canonical("Shell", []byte(`{"command":"ls","timeout":10}`))
	if a.Digest() != b.Digest() {
		t.Errorf("two spellings of one call have different digests")
	}
	if a.Digest() == c.Digest() {
		t.Errorf("a different argument has the same digest")
	}
	if a.Digest() == d.Digest() {
		t.Errorf("a different tool has the same digest")
	}
	if !strings.HasPrefix(a.Digest(), "sha256:") || len(a.Digest()) != len("sha256:")+64 {
		t.Errorf("digest %q is not sha256:<64 hex>", a.Digest())
	}
	// The digest is of the canonical {"input":...,"name":...}.
	sum := sha256.Sum256([]byte(`{"input":{"command":"ls","timeout":10},"name":"Bash"}`))
	if want := "sha256:" + hex.EncodeToString(sum[:]); a.Digest() != want {
		t.Errorf("Digest() = %s, want %s", a.Digest(), want)
	}
}

func TestCallValue(t *testing.T) {
	c, err := Canonical("Bash", []byte(`{"command":"ls","n":2}`))
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.Value()
	if err != nil {
		t.Fatal(err)
	}
	m, ok := v.(map[string]any)
	if !ok || m["command"] != "ls" || m["n"] != 2.0 {
		t.Errorf("Value() = %#v", v)
	}
}

// FuzzCanonical checks that canonical form is a fixed point, is valid JSON
// equal in value to the input, and that every rejection is ErrInvalidArgs.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{"command":"rm -rf /tmp/x","description":"clean"}`,
		`{"b":[1,2,{"d":1.0e10,"c":"\u00e9"}],"a":null}`,
		`[]`, `""`, `0`, `{"a":1,"a":2}`, `{"a":`, "\"\xff\"", `{"x":"\ud800"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, args []byte) {
		c, err := Canonical("T", args)
		if err != nil {
			if !errors.Is(err, ErrInvalidArgs) {
				t.Fatalf("error %v is not ErrInvalidArgs", err)
			}
			return
		}
		if !json.Valid(c.Input) {
			t.Fatalf("canonical %q is not valid JSON", c.Input)
		}
		again, err := Canonical("T", c.Input)
		if err != nil {
			t.Fatalf("canonical form %q rejected: %v", c.Input, err)
		}
		if string(again.Input) != string(c.Input) {
			t.Fatalf("not a fixed point: %q → %q", c.Input, again.Input)
		}
		if len(args) > 0 && strings.TrimSpace(string(args)) != "" {
			var a, b any
			if json.Unmarshal(args, &a) == nil && json.Unmarshal(c.Input, &b) == nil {
				ja, _ := json.Marshal(a)
				jb, _ := json.Marshal(b)
				if string(ja) != string(jb) {
					t.Fatalf("value changed: %s → %s", ja, jb)
				}
			}
		}
	})
}
