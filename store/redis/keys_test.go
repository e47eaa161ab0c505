package redis

import (
	"cmp"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"gatekeeper/trajectory"
)

func TestRootAndKeys(t *testing.T) {
	tests := []struct {
		id, root, rec, ev string
	}{
		{"run-42", "run-42", "gk:{run-42}:rec:run-42", "gk:{run-42}:ev:run-42"},
		{"run-42/3f9a~2", "run-42", "gk:{run-42}:rec:run-42/3f9a~2", "gk:{run-42}:ev:run-42/3f9a~2"},
		{"run-42/3f9a~2/b~1", "run-42", "gk:{run-42}:rec:run-42/3f9a~2/b~1", "gk:{run-42}:ev:run-42/3f9a~2/b~1"},
		{"/odd", "", "gk:{}:rec:/odd", "gk:{}:ev:/odd"},
	}
	for _, tc := range tests {
		t.Run(tc.id, func(t *testing.T) {
			if got := rootOf(tc.id); got != tc.root {
				t.Errorf("rootOf = %q, want %q", got, tc.root)
			}
			if got := recKey(tc.id); got != tc.rec {
				t.Errorf("recKey = %q, want %q", got, tc.rec)
			}
			if got := evKey(tc.id); got != tc.ev {
				t.Errorf("evKey = %q, want %q", got, tc.ev)
			}
		})
	}
}

func TestCheckID(t *testing.T) {
	tests := []struct {
		name string
		id   string
		ok   bool
	}{
		{"plain", "run-1", true},
		{"thread", "run-1/ab~2", true},
		{"open brace", "run{1", false},
		{"close brace", "run}1", false},
		{"tag in a thread", "run-1/{x}", false},
	}
	for _, tc := range tests {
		err := checkID(tc.id)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, trajectory.ErrInvalidRecord)) {
			t.Errorf("%s: checkID(%q) = %v", tc.name, tc.id, err)
		}
	}
}

func TestMemberOrder(t *testing.T) {
	base := time.Date(2026, 12, 2, 10, 0, 0, 500, time.UTC)
	tests := []struct {
		name         string
		newer, older time.Time
		idA, idB     string
	}{
		{"a nanosecond apart", base.Add(time.Nanosecond), base, "z", "a"},
		{"a second apart, nanoseconds reversed", base.Add(time.Second - 400), base, "a", "b"},
		{"before 1970", time.Unix(-5, 0), time.Unix(-6, 999_999_999), "a", "a"},
		{"across 1970", time.Unix(0, 0), time.Unix(-1, 999_999_999), "a", "a"},
		{"zero time", time.Unix(-62135596800, 1), time.Time{}, "a", "a"},
	}
	for _, tc := range tests {
		if a, b := member(tc.idA, tc.newer), member(tc.idB, tc.older); a >= b {
			t.Errorf("%s: newer %q sorts after older %q", tc.name, a, b)
		}
	}
	if a, b := member("tie-a", base), member("tie-b", base); a >= b {
		t.Errorf("ties: %q sorts after %q", a, b)
	}
	if m := member("run-1/a~1", base); memberID(m) != "run-1/a~1" || len(m) != memberLen+len("run-1/a~1") {
		t.Errorf("member %q", m)
	}
	for _, bad := range []string{"", "short", strings.Repeat("0", 24) + "x", strings.Repeat("0", 24) + ":"} {
		if id := memberID(bad); id != "" {
			t.Errorf("memberID(%q) = %q, want none", bad, id)
		}
	}
}

// FuzzMemberOrder checks that index members sort as List must: newest
// creation first, then id ascending, with the id recoverable.
func FuzzMemberOrder(f *testing.F) {
	f.Add(int64(1796205600), int64(123456789), "run-1", int64(1796205600), int64(123456788), "run-2")
	f.Add(int64(-1), int64(999999999), "a", int64(0), int64(0), "a")
	f.Add(int64(0), int64(0), "tie-b", int64(0), int64(0), "tie-a")
	f.Add(int64(-62135596800), int64(0), "x", int64(253402300799), int64(999999999), "y/z~1")
	f.Fuzz(func(t *testing.T, secA, nsA int64, idA string, secB, nsB int64, idB string) {
		// Past about ±35,000 years time.Time's own comparison overflows.
		const far = 1 << 40
		if idA == "" || idB == "" || secA > far || secA < -far || secB > far || secB < -far {
			return
		}
		a := time.Unix(secA, nsA%1e9)
		b := time.Unix(secB, nsB%1e9)
		ma, mb := member(idA, a), member(idB, b)
		if memberID(ma) != idA || memberID(mb) != idB {
			t.Fatalf("ids lost: %q -> %q, %q -> %q", idA, memberID(ma), idB, memberID(mb))
		}
		want := b.Compare(a) // newest first
		if want == 0 {
			want = cmp.Compare(idA, idB)
		}
		if got := cmp.Compare(ma, mb); got != want {
			t.Fatalf("(%v, %q) vs (%v, %q): members compare %d, want %d", a, idA, b, idB, got, want)
		}
	})
}

// FuzzDecodeEvent feeds stream entries as Redis could hold them: decoding
// must fail cleanly or give back an event that encodes to the same entry.
func FuzzDecodeEvent(f *testing.F) {
	f.Add("0-1", `{"at":"2026-12-02T10:00:00Z","type":"turn","reason":"tool_use"}`, `{"input_tokens":1}`, true)
	f.Add("0-9223372036854775807", `{"at":"2026-12-02T10:00:00.5+02:00","type":"transition","from":"READY","to":"CALLING_MODEL"}`, "", false)
	f.Add("1-1", `{}`, "", false)
	f.Add("0-0", `{"type":1}`, "x", true)
	f.Fuzz(func(t *testing.T, entryID, e, d string, hasData bool) {
		values := map[string]any{"e": e}
		if hasData {
			values["d"] = d
		}
		ev, err := decodeEvent("run-1", entryID, values)
		if err != nil {
			return
		}
		if ev.Seq < 1 || ev.Trajectory != "run-1" {
			t.Fatalf("decoded %+v", ev)
		}
		args, err := eventArgs(nil, []trajectory.Event{ev})
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeEvent("run-1", entryID, map[string]any{"e": args[0], "d": args[1]})
		if err != nil {
			t.Fatalf("re-decoding %v: %v", args, err)
		}
		if !again.At.Equal(ev.At) || again.Type != ev.Type || again.From != ev.From || again.To != ev.To ||
			again.Reason != ev.Reason || string(again.Data) != string(ev.Data) {
			t.Fatalf("round trip changed %+v into %+v", ev, again)
		}
		var w eventJSON
		if err := json.Unmarshal([]byte(args[0].(string)), &w); err != nil {
			t.Fatalf("encoded event is not JSON: %v", err)
		}
	})
}

// TestEncodeRecordAsMarshal: the record's JSON field is byte for byte what
// json.Marshal gives, HTML-sensitive and line-separator runes included, so
// calling MarshalJSON directly changed nothing stored; and it reads back.
func TestEncodeRecordAsMarshal(t *testing.T) {
	r := trajectory.New("run-<1>", "team-&", t0)
	r.LastStopReason = "<script>&\u2028\u2029é"
	r.Pending.Control = &trajectory.Control{Kind: trajectory.ControlInterrupt, Message: "stop </b> & \"go\"", By: "ann", At: t0}
	r.Children = []string{"run-<1>/a"}
	got, err := encodeRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	c := *r
	c.Children = nil
	want, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("encodeRecord:\n%s\njson.Marshal:\n%s", got, want)
	}
	back, err := decodeRecord(r.ID, got, `["run-<1>/a"]`)
	if err != nil {
		t.Fatal(err)
	}
	if back.LastStopReason != r.LastStopReason || back.Pending.Control.Message != r.Pending.Control.Message || len(back.Children) != 1 {
		t.Errorf("read back %+v", back)
	}
	if _, err := decodeRecord(r.ID, got[:len(got)-1], nil); err == nil {
		t.Error("a cut record decoded")
	}
}
