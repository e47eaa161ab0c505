package sse

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"gatekeeper/internal/fixturetest"
)

// FuzzReader feeds arbitrary bytes cut at points taken from cuts (each byte
// is the length of the next read, 0 meaning an empty read) to a Reader with
// a small limit and to one with the default limit. Every run must match a
// one-piece feed and the reference model event for event, give back the
// input as Raw, and never hold more than the limit.
func FuzzReader(f *testing.F) {
	seeds := []string{
		"data: a\n\n",
		"event: e\r\ndata: a\r\ndata: b\r\n\r\n",
		"data: a\r\rdata: b\r",
		"\xEF\xBB\xBFid: 1\nretry: 99\n: c\ndata\n\n",
		"id: a\x00b\ndata: x\n\nid\n\n",
		"data: x\r\r\n\r\n\n\r",
		"\xEF\xBB",
		": keepalive\n\ndata: [DONE]\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s), []byte{1, 2, 3, 0, 5}, uint16(8))
	}
	for _, path := range fixturetest.Glob(f, filepath.Join("testdata", "sse", "*.sse")) {
		f.Add(fixturetest.ReadFile(f, path), []byte{7, 200, 1, 64, 13}, uint16(300))
	}
	f.Fuzz(func(t *testing.T, in, cuts []byte, limit uint16) {
		small := int(limit%1024) + 1
		for _, maxSize := range []int{small, DefaultMaxEventSize} {
			want, tooLarge := refParse(in, maxSize)
			oneShot, err := run(t, maxSize, fixturetest.Whole(in))
			checkRun(t, "one piece", in, want, tooLarge, oneShot, err)
			chunked, err := run(t, maxSize, cutAt(in, cuts))
			checkRun(t, "cut", in, want, tooLarge, chunked, err)
		}
	})
}

func checkRun(t *testing.T, how string, in []byte, want []rec, tooLarge bool, got []rec, err error) {
	t.Helper()
	if tooLarge != errors.Is(err, ErrEventTooLarge) || (!tooLarge && err != nil) {
		t.Fatalf("%s: err = %v, want ErrEventTooLarge: %v", how, err, tooLarge)
	}
	if !equalRecs(got, want) {
		t.Fatalf("%s: events differ from the reference model:\n got %s\nwant %s", how, show(got), show(want))
	}
	raw := rawOf(got)
	if !tooLarge && raw != string(in) {
		t.Fatalf("%s: Raw of the events is not the input", how)
	}
	if !strings.HasPrefix(string(in), raw) {
		t.Fatalf("%s: Raw of the events is not a prefix of the input", how)
	}
}

// cutAt splits in into reads whose lengths are the bytes of cuts in turn;
// the rest of in, if any, is the last read.
func cutAt(in, cuts []byte) [][]byte {
	var out [][]byte
	for _, c := range cuts {
		n := min(int(c), len(in))
		out = append(out, in[:n:n])
		in = in[n:]
	}
	return append(out, in)
}
