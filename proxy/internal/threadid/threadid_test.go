package threadid

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"gatekeeper/trajectory"
)

func TestIDs(t *testing.T) {
	k1, k2 := [32]byte{1}, [32]byte{2}
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	named, err := FromHeaders(hdr("X-Gatekeeper-Trajectory", "run-1", "Session-Id", "s"), k1)
	if err != nil || named != "run-1" {
		t.Fatalf("FromHeaders with X-Gatekeeper-Trajectory = %q, %v; want run-1", named, err)
	}
	if _, err := FromHeaders(hdr("X-Gatekeeper-Trajectory", "a b"), k1); !errors.Is(err, ErrInvalidHeader) {
		t.Fatalf("an invalid X-Gatekeeper-Trajectory gave %v, want ErrInvalidHeader", err)
	}
	s1, _ := FromHeaders(hdr("Session-Id", "s"), k1)
	s2, _ := FromHeaders(hdr("Session-Id", "s"), k2)
	if s1 == "" || s1 == s2 {
		t.Fatalf("one session id under two keys gave %q and %q: want two runs", s1, s2)
	}
	if got := Session(k1, "s"); got != s1 {
		t.Fatalf("the session hint gave %q, the session header %q: want one run", got, s1)
	}
	for _, name := range []string{"X-Claude-Code-Session-Id", "Session-Id", "Thread-Id", "X-Session-Id", "X-Session-Affinity"} {
		if got, _ := FromHeaders(hdr(name, "s"), k1); got != s1 {
			t.Errorf("FromHeaders with %s = %q, want the session's run %q", name, got, s1)
		}
	}
	if got, _ := FromHeaders(hdr("X-Session-Id", strings.Repeat("s", maxSessionHeader+1)), k1); got != "" {
		t.Errorf("an oversized session header gave %q, want none", got)
	}
	if none, err := FromHeaders(http.Header{}, k1); none != "" || err != nil {
		t.Fatalf("no headers gave %q, %v", none, err)
	}
	if a, b := Fresh(), Fresh(); a == b || a[:2] != "c-" || !trajectory.ValidID(a) {
		t.Fatalf("two first turns gave %q and %q: want two new runs", a, b)
	}
	if a, b := Conversation(k1, "fp", "call:1"), Conversation(k1, "fp", "call:2"); a == b || a[:2] != "c-" || a != Conversation(k1, "fp", "call:1") {
		t.Fatalf("two first replies of one conversation gave %q and %q: want two runs, each stable", a, b)
	}
	if Link(k1, "call:1") == Link(k2, "call:1") {
		t.Fatal("one reply's link under two keys is one key: want one per virtual key")
	}

	if key, parent := Key(hdr("X-Claude-Code-Agent-Id", "a", "X-Claude-Code-Parent-Agent-Id", "p"), "fp"); key != "agent:a" || parent != "agent:p" {
		t.Fatalf("Key of a subagent = %q, %q", key, parent)
	}
	if key, parent := Key(http.Header{}, "fp"); key != "fp:fp" || parent != "" {
		t.Fatalf("Key of a conversation = %q, %q", key, parent)
	}
	c := Child("run", "fp:x")
	if c == Child("run", "fp:y") || c[:4] != "run/" {
		t.Fatalf("Child = %q: want run/<hash>, one per key", c)
	}
	if got := Sibling("run", "run", 2); got != "run/~2" {
		t.Fatalf("Sibling of the root = %q", got)
	}
	if got := Sibling("run", c, 3); got != c+"~3" {
		t.Fatalf("Sibling of a child = %q", got)
	}
}
