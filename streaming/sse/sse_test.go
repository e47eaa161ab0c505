package sse

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"gatekeeper/internal/fixturetest"
)

var update = flag.Bool("update", false, "rewrite the golden event files under testdata/sse")

// rec is an Event copied out of its callback, in a form tests can compare.
type rec struct {
	Name         string `json:"name,omitempty"`
	Data         string `json:"data,omitempty"`
	ID           string `json:"id,omitempty"`
	Retry        string `json:"retry,omitempty"` // "" when the event has none
	HasData      bool   `json:"has_data,omitempty"`
	Comments     int    `json:"comments,omitempty"`
	Unterminated bool   `json:"unterminated,omitempty"`
	Raw          string `json:"raw"`
}

func record(ev *Event) rec {
	r := rec{
		Name:         string(ev.Name),
		Data:         string(ev.Data),
		ID:           string(ev.ID),
		HasData:      ev.HasData,
		Comments:     ev.Comments,
		Unterminated: ev.Unterminated,
		Raw:          string(ev.Raw),
	}
	if ev.Retry != -1 {
		r.Retry = strconv.FormatInt(ev.Retry, 10)
	}
	return r
}

// run feeds chunks to a Reader limited to maxSize, then finishes it, and
// returns the events and the first error. Each chunk is fed from a copy that
// is overwritten once Feed returns, so a Reader that kept the caller's bytes
// shows up as corrupted events; Buffered is checked against the limit after
// every call.
func run(tb testing.TB, maxSize int, chunks [][]byte) ([]rec, error) {
	tb.Helper()
	r := NewReader(maxSize)
	if maxSize <= 0 {
		maxSize = DefaultMaxEventSize
	}
	var got []rec
	fn := func(ev *Event) error {
		got = append(got, record(ev))
		return nil
	}
	for i, c := range chunks {
		p := append([]byte(nil), c...)
		err := r.Feed(p, fn)
		for j := range p {
			p[j] = '#'
		}
		if b := r.Buffered(); b > maxSize {
			tb.Fatalf("after chunk %d: Buffered() = %d, over the limit %d", i, b, maxSize)
		}
		if err != nil {
			return got, err
		}
	}
	return got, r.Finish(fn)
}

func rawOf(evs []rec) string {
	var b strings.Builder
	for _, e := range evs {
		b.WriteString(e.Raw)
	}
	return b.String()
}

// chunkings are ways of splitting one input into Feed calls.
type chunking struct {
	name   string
	chunks [][]byte
}

// chunkingsOf lists the ways the table tests split their (small) inputs:
// whole, a byte at a time, and cut in two at every point.
func chunkingsOf(in []byte) []chunking {
	cs := []chunking{{"whole", fixturetest.Whole(in)}, {"bytewise", fixturetest.BySize(in, 1)}}
	if len(in) > 512 {
		rng := rand.New(rand.NewPCG(1, uint64(len(in))))
		for i := range 16 {
			cs = append(cs, chunking{"random" + strconv.Itoa(i), fixturetest.RandomSplit(in, rng)})
		}
		return cs
	}
	for i := 1; i < len(in); i++ {
		cs = append(cs, chunking{"cut" + strconv.Itoa(i), [][]byte{in[:i:i], in[i:]}})
	}
	return cs
}

func TestReaderRules(t *testing.T) {
	long := strings.Repeat("x", 70_000) // past bufio.Scanner's 64 KiB default
	tests := []struct {
		name string
		in   string
		want []rec
	}{
		{name: "empty stream", in: "", want: nil},
		{
			name: "data with LF endings",
			in:   "data: hello\n\n",
			want: []rec{{Data: "hello", HasData: true, Raw: "data: hello\n\n"}},
		},
		{
			name: "event name and data",
			in:   "event: ping\ndata: {}\n\n",
			want: []rec{{Name: "ping", Data: "{}", HasData: true, Raw: "event: ping\ndata: {}\n\n"}},
		},
		{
			name: "name and data reset between events",
			in:   "event: a\ndata: x\n\ndata: y\n\n",
			want: []rec{
				{Name: "a", Data: "x", HasData: true, Raw: "event: a\ndata: x\n\n"},
				{Data: "y", HasData: true, Raw: "data: y\n\n"},
			},
		},
		{
			name: "last event name wins",
			in:   "event: a\nevent: b\ndata: x\n\n",
			want: []rec{{Name: "b", Data: "x", HasData: true, Raw: "event: a\nevent: b\ndata: x\n\n"}},
		},
		{
			name: "multi-line data joined with LF",
			in:   "data: a\ndata:\ndata:  b\n\n",
			want: []rec{{Data: "a\n\n b", HasData: true, Raw: "data: a\ndata:\ndata:  b\n\n"}},
		},
		{
			name: "value without space after colon",
			in:   "data:x\n\n",
			want: []rec{{Data: "x", HasData: true, Raw: "data:x\n\n"}},
		},
		{
			name: "only one leading space stripped",
			in:   "data:   x\n\n",
			want: []rec{{Data: "  x", HasData: true, Raw: "data:   x\n\n"}},
		},
		{
			name: "trailing spaces kept",
			in:   "data: {\"index\":0}   \n\n",
			want: []rec{{Data: "{\"index\":0}   ", HasData: true, Raw: "data: {\"index\":0}   \n\n"}},
		},
		{
			name: "colon inside value",
			in:   "data: a: b\n\n",
			want: []rec{{Data: "a: b", HasData: true, Raw: "data: a: b\n\n"}},
		},
		{
			name: "empty data value still dispatches",
			in:   "data:\n\n",
			want: []rec{{HasData: true, Raw: "data:\n\n"}},
		},
		{
			name: "fields without colon have empty values",
			in:   "event\ndata\ndata\n\n",
			want: []rec{{Data: "\n", HasData: true, Raw: "event\ndata\ndata\n\n"}},
		},
		{
			name: "comment-only block",
			in:   ": keepalive\n\n",
			want: []rec{{Comments: 1, Raw: ": keepalive\n\n"}},
		},
		{
			name: "comments beside fields",
			in:   ":\n:x\ndata: y\n: z\n\n",
			want: []rec{{Data: "y", HasData: true, Comments: 3, Raw: ":\n:x\ndata: y\n: z\n\n"}},
		},
		{
			name: "blank lines are blocks of their own",
			in:   "\n\n\r\n\r",
			want: []rec{{Raw: "\n"}, {Raw: "\n"}, {Raw: "\r\n"}, {Raw: "\r"}},
		},
		{
			name: "id carries over events",
			in:   "id: 1\ndata: a\n\ndata: b\n\nid: 2\n\ndata: c\n\n",
			want: []rec{
				{ID: "1", Data: "a", HasData: true, Raw: "id: 1\ndata: a\n\n"},
				{ID: "1", Data: "b", HasData: true, Raw: "data: b\n\n"},
				{ID: "2", Raw: "id: 2\n\n"},
				{ID: "2", Data: "c", HasData: true, Raw: "data: c\n\n"},
			},
		},
		{
			name: "id containing NUL ignored",
			in:   "id: 1\n\nid: a\x00b\ndata: x\n\n",
			want: []rec{
				{ID: "1", Raw: "id: 1\n\n"},
				{ID: "1", Data: "x", HasData: true, Raw: "id: a\x00b\ndata: x\n\n"},
			},
		},
		{
			name: "empty id clears it",
			in:   "id: 1\n\nid\ndata: x\n\nid: 2\nid:\n\n",
			want: []rec{
				{ID: "1", Raw: "id: 1\n\n"},
				{Data: "x", HasData: true, Raw: "id\ndata: x\n\n"},
				{Raw: "id: 2\nid:\n\n"},
			},
		},
		{
			name: "retry belongs to its block",
			in:   "retry: 3000\ndata: x\n\ndata: y\n\n",
			want: []rec{
				{Retry: "3000", Data: "x", HasData: true, Raw: "retry: 3000\ndata: x\n\n"},
				{Data: "y", HasData: true, Raw: "data: y\n\n"},
			},
		},
		{
			name: "retry that is not only digits ignored",
			in:   "retry: 10\nretry: 1x\nretry: -5\nretry:\nretry:  7\nretry: 1.5\n\n",
			want: []rec{{Retry: "10", Raw: "retry: 10\nretry: 1x\nretry: -5\nretry:\nretry:  7\nretry: 1.5\n\n"}},
		},
		{
			name: "retry overflowing int64 saturates",
			in:   "retry: 99999999999999999999999\n\n",
			want: []rec{{Retry: strconv.FormatInt(math.MaxInt64, 10), Raw: "retry: 99999999999999999999999\n\n"}},
		},
		{
			name: "retry with leading zeros",
			in:   "retry: 000000000000000000000042\n\n",
			want: []rec{{Retry: "42", Raw: "retry: 000000000000000000000042\n\n"}},
		},
		{
			name: "unknown and mis-spelled fields ignored",
			in:   "foo: bar\nData: x\n data: y\nevent : z\ndata : w\n\n",
			want: []rec{{Raw: "foo: bar\nData: x\n data: y\nevent : z\ndata : w\n\n"}},
		},
		{
			name: "CRLF endings",
			in:   "event: e\r\ndata: a\r\ndata: b\r\n\r\n",
			want: []rec{{Name: "e", Data: "a\nb", HasData: true, Raw: "event: e\r\ndata: a\r\ndata: b\r\n\r\n"}},
		},
		{
			name: "lone CR endings",
			in:   "data: a\r\rdata: b\r\r",
			want: []rec{
				{Data: "a", HasData: true, Raw: "data: a\r\r"},
				{Data: "b", HasData: true, Raw: "data: b\r\r"},
			},
		},
		{
			name: "mixed endings",
			in:   "data: a\r\ndata: b\rdata: c\n\r\n",
			want: []rec{{Data: "a\nb\nc", HasData: true, Raw: "data: a\r\ndata: b\rdata: c\n\r\n"}},
		},
		{
			name: "CR then CRLF",
			in:   "data: a\r\r\ndata: b\n\n",
			want: []rec{
				{Data: "a", HasData: true, Raw: "data: a\r\r\n"},
				{Data: "b", HasData: true, Raw: "data: b\n\n"},
			},
		},
		{
			name: "LF then lone CR at end of stream",
			in:   "data: a\n\r",
			want: []rec{{Data: "a", HasData: true, Raw: "data: a\n\r"}},
		},
		{
			name: "byte order mark skipped and kept in Raw",
			in:   "\xEF\xBB\xBFdata: a\n\n",
			want: []rec{{Data: "a", HasData: true, Raw: "\xEF\xBB\xBFdata: a\n\n"}},
		},
		{
			name: "byte order mark before a blank line",
			in:   "\xEF\xBB\xBF\ndata: a\n\n",
			want: []rec{{Raw: "\xEF\xBB\xBF\n"}, {Data: "a", HasData: true, Raw: "data: a\n\n"}},
		},
		{
			name: "only one byte order mark skipped",
			in:   "\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\n",
			want: []rec{{Raw: "\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\n"}},
		},
		{
			name: "byte order mark later in the stream is data",
			in:   "data: a\n\n\xEF\xBB\xBFdata: b\n\n",
			want: []rec{
				{Data: "a", HasData: true, Raw: "data: a\n\n"},
				{Raw: "\xEF\xBB\xBFdata: b\n\n"},
			},
		},
		{
			name: "byte order mark alone",
			in:   "\xEF\xBB\xBF",
			want: []rec{{Unterminated: true, Raw: "\xEF\xBB\xBF"}},
		},
		{
			name: "truncated byte order mark is a field name",
			in:   "\xEF\xBB",
			want: []rec{{Unterminated: true, Raw: "\xEF\xBB"}},
		},
		{
			name: "unterminated last line",
			in:   "data: a\n\ndata: b",
			want: []rec{
				{Data: "a", HasData: true, Raw: "data: a\n\n"},
				{Data: "b", HasData: true, Unterminated: true, Raw: "data: b"},
			},
		},
		{
			name: "unterminated block ending in one LF",
			in:   "event: x\ndata: [DONE]\n",
			want: []rec{{Name: "x", Data: "[DONE]", HasData: true, Unterminated: true, Raw: "event: x\ndata: [DONE]\n"}},
		},
		{
			name: "unterminated block ending in one CR",
			in:   "data: b\r",
			want: []rec{{Data: "b", HasData: true, Unterminated: true, Raw: "data: b\r"}},
		},
		{
			name: "unterminated comment",
			in:   ": x",
			want: []rec{{Comments: 1, Unterminated: true, Raw: ": x"}},
		},
		{
			name: "NUL and invalid UTF-8 in data kept",
			in:   "data: a\x00\xff\n\n",
			want: []rec{{Data: "a\x00\xff", HasData: true, Raw: "data: a\x00\xff\n\n"}},
		},
		{
			name: "multi-byte UTF-8 split anywhere",
			in:   "event: é\ndata: héllo → 世界\n\n",
			want: []rec{{Name: "é", Data: "héllo → 世界", HasData: true, Raw: "event: é\ndata: héllo → 世界\n\n"}},
		},
		{
			name: "line longer than 64 KiB",
			in:   "data: " + long + "\ndata: " + long + "\r\n\r\ndata: short\n\n",
			want: []rec{
				{Data: long + "\n" + long, HasData: true, Raw: "data: " + long + "\ndata: " + long + "\r\n\r\n"},
				{Data: "short", HasData: true, Raw: "data: short\n\n"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(tt.in)
			for _, c := range chunkingsOf(in) {
				got, err := run(t, 0, c.chunks)
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				if !equalRecs(got, tt.want) {
					t.Fatalf("%s:\n got %s\nwant %s", c.name, show(got), show(tt.want))
				}
			}
			// The reference model must agree with the table, or the fuzz
			// target compares against something wrong.
			if ref, tooLarge := refParse(in, DefaultMaxEventSize); tooLarge || !equalRecs(ref, tt.want) {
				t.Fatalf("reference model:\n got %s\nwant %s", show(ref), show(tt.want))
			}
		})
	}
}

func equalRecs(a, b []rec) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func show(evs []rec) string {
	b, _ := json.Marshal(evs)
	if len(b) > 2000 {
		return string(b[:2000]) + "..."
	}
	return string(b)
}

func TestReaderEventTooLarge(t *testing.T) {
	tests := []struct {
		name    string
		max     int
		chunks  []string
		want    []rec // events dispatched before the error, or all of them
		wantErr bool
	}{
		{
			name:    "event one byte over the limit",
			max:     10,
			chunks:  []string{"data: 123\n", "\n"},
			wantErr: true,
		},
		{
			name:   "event at the limit passes",
			max:    11,
			chunks: []string{"data: 123\n", "\n"},
			want:   []rec{{Data: "123", HasData: true, Raw: "data: 123\n\n"}},
		},
		{
			name:   "many events, each under the limit",
			max:    16,
			chunks: []string{strings.Repeat("data: 12345678\n\n", 100)},
			want:   repeatRec(rec{Data: "12345678", HasData: true, Raw: "data: 12345678\n\n"}, 100),
		},
		{
			name:    "complete oversized event in one chunk",
			max:     16,
			chunks:  []string{"data: a\n\ndata: 0123456789abcdef\n\ndata: b\n\n"},
			want:    []rec{{Data: "a", HasData: true, Raw: "data: a\n\n"}},
			wantErr: true,
		},
		{
			name:    "line growing across chunks",
			max:     32,
			chunks:  []string{"data: a\n\n", "data: ", strings.Repeat("x", 10), strings.Repeat("x", 10), strings.Repeat("x", 10)},
			want:    []rec{{Data: "a", HasData: true, Raw: "data: a\n\n"}},
			wantErr: true,
		},
		{
			name:    "many short lines in one event",
			max:     32,
			chunks:  []string{strings.Repeat(":\n", 40)},
			wantErr: true,
		},
		{
			name:    "oversized unterminated tail",
			max:     8,
			chunks:  []string{"data: 1\n", "23"},
			wantErr: true,
		},
		{
			name:    "held CR that makes the event too large",
			max:     9,
			chunks:  []string{"data: x\r\r", "\n"},
			wantErr: true,
		},
		{
			name:   "held CR followed by the next event",
			max:    9,
			chunks: []string{"data: x\r\r", "data: y\r\r"},
			want: []rec{
				{Data: "x", HasData: true, Raw: "data: x\r\r"},
				{Data: "y", HasData: true, Raw: "data: y\r\r"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var in []byte
			for _, c := range tt.chunks {
				in = append(in, c...)
			}
			ways := append([]chunking{{"as listed", toChunks(tt.chunks)}}, chunkingsOf(in)...)
			for _, c := range ways {
				got, err := run(t, tt.max, c.chunks)
				if tt.wantErr != errors.Is(err, ErrEventTooLarge) || (!tt.wantErr && err != nil) {
					t.Fatalf("%s: err = %v, want ErrEventTooLarge: %v", c.name, err, tt.wantErr)
				}
				if !equalRecs(got, tt.want) {
					t.Fatalf("%s:\n got %s\nwant %s", c.name, show(got), show(tt.want))
				}
			}
		})
	}
}

func repeatRec(e rec, n int) []rec {
	out := make([]rec, n)
	for i := range out {
		out[i] = e
	}
	return out
}

func toChunks(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

func TestReaderDefaultLimit(t *testing.T) {
	r := NewReader(0)
	nop := func(*Event) error { return nil }
	line := bytes.Repeat([]byte("x"), 1<<20)
	if err := r.Feed([]byte("data: "), nop); err != nil {
		t.Fatal(err)
	}
	for i := range 15 {
		if err := r.Feed(line, nop); err != nil {
			t.Fatalf("after %d MiB: %v", i+1, err)
		}
	}
	// The line is now exactly DefaultMaxEventSize long: still allowed.
	if err := r.Feed(line[:len(line)-len("data: ")], nop); err != nil {
		t.Fatalf("at DefaultMaxEventSize: %v", err)
	}
	if err := r.Feed([]byte("x"), nop); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("past DefaultMaxEventSize: err = %v, want ErrEventTooLarge", err)
	}
	if r.Buffered() > DefaultMaxEventSize {
		t.Fatalf("Buffered() = %d, over DefaultMaxEventSize", r.Buffered())
	}
}

func TestReaderErrorsAreFinal(t *testing.T) {
	errStop := errors.New("stop")
	tests := []struct {
		name    string
		stopAt  int // the callback fails on this event (1-based)
		chunks  []string
		finish  bool // the failing event is the unterminated one
		wantErr error
	}{
		{name: "callback error in Feed", stopAt: 2, chunks: []string{"data: a\n\ndata: b\n\ndata: c\n\n"}, wantErr: errStop},
		{name: "callback error on a buffered event", stopAt: 1, chunks: []string{"data: a", "\n\ndata: b\n\n"}, wantErr: errStop},
		{name: "callback error in Finish", stopAt: 2, chunks: []string{"data: a\n\ndata: b"}, finish: true, wantErr: errStop},
		{name: "too large", stopAt: 100, chunks: []string{"data: 0123456789abcdef0123456789abcdef"}, wantErr: ErrEventTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(32)
			calls := 0
			fn := func(*Event) error {
				calls++
				if calls == tt.stopAt {
					return errStop
				}
				return nil
			}
			var err error
			for _, c := range tt.chunks {
				if err = r.Feed([]byte(c), fn); err != nil {
					break
				}
			}
			if tt.finish {
				if err != nil {
					t.Fatalf("Feed: %v", err)
				}
				err = r.Finish(fn)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			before := calls
			if err := r.Feed([]byte("data: later\n\n"), fn); !errors.Is(err, tt.wantErr) {
				t.Fatalf("Feed after the error: err = %v, want %v", err, tt.wantErr)
			}
			if err := r.Finish(fn); !errors.Is(err, tt.wantErr) {
				t.Fatalf("Finish after the error: err = %v, want %v", err, tt.wantErr)
			}
			if calls != before {
				t.Fatalf("%d events dispatched after the error", calls-before)
			}
		})
	}
}

// streamFiles lists the testdata streams and, when present, the shared
// recorded provider streams.
func streamFiles(t *testing.T) (own, fixtures []string) {
	t.Helper()
	own = fixturetest.Glob(t, filepath.Join("testdata", "sse", "*.sse"))
	fixtures, _ = filepath.Glob(filepath.Join(fixturetest.Path(), "*.sse"))
	return own, fixtures
}

// TestReaderChunkingInvariance feeds every stream whole, a byte at a time,
// in 4 KiB reads and at many random split points: the events must be the
// same each time and their Raw bytes must add up to the stream.
func TestReaderChunkingInvariance(t *testing.T) {
	own, fixtures := streamFiles(t)
	check := func(t *testing.T, path string) {
		in := fixturetest.ReadFile(t, path)
		want, err := run(t, 0, fixturetest.Whole(in))
		if err != nil {
			t.Fatal(err)
		}
		if rawOf(want) != string(in) {
			t.Fatal("Raw of the events is not the stream")
		}
		if ref, _ := refParse(in, DefaultMaxEventSize); !equalRecs(ref, want) {
			t.Fatalf("reference model disagrees:\n got %s\nwant %s", show(want), show(ref))
		}
		rng := rand.New(rand.NewPCG(7, uint64(len(in))))
		ways := []chunking{{"bytewise", fixturetest.BySize(in, 1)}, {"4KiB", fixturetest.BySize(in, 4096)}, {"16KiB", fixturetest.BySize(in, 16384)}}
		iterations := min(200, max(20, 400_000/max(len(in), 1)))
		for i := range iterations {
			ways = append(ways, chunking{"random" + strconv.Itoa(i), fixturetest.RandomSplit(in, rng)})
		}
		for _, c := range ways {
			got, err := run(t, 0, c.chunks)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if !equalRecs(got, want) {
				t.Fatalf("%s: events differ from a one-piece feed:\n got %s\nwant %s", c.name, show(got), show(want))
			}
		}
	}
	for _, path := range own {
		t.Run(filepath.Base(path), func(t *testing.T) { check(t, path) })
	}
	if len(fixtures) == 0 {
		t.Log("no shared fixtures: skipping them")
	}
	for _, path := range fixtures {
		t.Run("fixture/"+filepath.Base(path), func(t *testing.T) { check(t, path) })
	}
}

// TestReaderGolden compares the events of each testdata stream with the
// reviewed transcript beside it (go test -run Golden -update rewrites them).
func TestReaderGolden(t *testing.T) {
	own, _ := streamFiles(t)
	for _, path := range own {
		t.Run(filepath.Base(path), func(t *testing.T) {
			in := fixturetest.ReadFile(t, path)
			got, err := run(t, 0, fixturetest.Whole(in))
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.MarshalIndent(got, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			b = append(b, '\n')
			golden := strings.TrimSuffix(path, ".sse") + ".events.json"
			if *update {
				if err := os.WriteFile(golden, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if want := fixturetest.ReadFile(t, golden); !bytes.Equal(b, want) {
				t.Fatalf("events differ from %s:\n%s", golden, b)
			}
		})
	}
}

// TestReaderFixturePayloads checks the framing of the recorded provider
// streams: every data payload is whole JSON or the [DONE] marker, so no
// line ending or neighbouring event leaked into it.
func TestReaderFixturePayloads(t *testing.T) {
	_, fixtures := streamFiles(t)
	if len(fixtures) == 0 {
		t.Skip("shared fixtures absent")
	}
	for _, path := range fixtures {
		t.Run(filepath.Base(path), func(t *testing.T) {
			in := fixturetest.ReadFile(t, path)
			evs, err := run(t, 0, fixturetest.BySize(in, 4096))
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for i, e := range evs {
				if !e.HasData {
					continue
				}
				n++
				if e.Data != "[DONE]" && !json.Valid([]byte(e.Data)) {
					t.Fatalf("event %d: data is not JSON: %q", i, e.Data)
				}
				if strings.ContainsAny(e.Name, "\r\n") {
					t.Fatalf("event %d: name holds a line ending: %q", i, e.Name)
				}
			}
			if n == 0 {
				t.Fatal("no data events")
			}
		})
	}
}

// steadyStream is a few complete events of the shapes seen in practice:
// named JSON events, a multi-line data event, an id, a comment and CRLF.
const steadyStream = "event: content_block_delta\n" +
	"data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"pa\"}    }\n\n" +
	": keepalive\n\n" +
	"id: 42\ndata: line one\ndata: line two\n\n" +
	"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\r\n\r\n"

func TestReaderSteadyStateAllocs(t *testing.T) {
	in := []byte(steadyStream)
	tests := []struct {
		name   string
		chunks [][]byte
	}{
		{name: "whole events per Feed", chunks: fixturetest.Whole(in)},
		{name: "events split across Feeds", chunks: [][]byte{in[:30], in[30:150], in[150:]}},
		{name: "CRLF split across Feeds", chunks: [][]byte{in[:len(in)-3], in[len(in)-3:]}},
		{name: "small reads", chunks: fixturetest.BySize(in, 7)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(0)
			events, dataBytes := 0, 0
			fn := func(ev *Event) error {
				events++
				dataBytes += len(ev.Data)
				return nil
			}
			var err error
			feedAll := func() {
				for _, c := range tt.chunks {
					if e := r.Feed(c, fn); e != nil && err == nil {
						err = e
					}
				}
			}
			for range 8 {
				feedAll() // warm up: buffers reach their working size
			}
			events = 0
			allocs := testing.AllocsPerRun(100, feedAll)
			if err != nil {
				t.Fatal(err)
			}
			if events != 101*4 {
				t.Fatalf("dispatched %d events, want %d", events, 101*4)
			}
			if allocs != 0 {
				t.Fatalf("%.1f allocations per Feed round of %d events, want 0", allocs, 4)
			}
		})
	}
}

// refParse is a deliberately plain, whole-input model of the event-stream
// rules, written apart from the Reader to check it against: split into
// lines, group lines into blocks, read fields. tooLarge reports a block
// longer than maxSize; the events returned are those before it.
func refParse(in []byte, maxSize int) (evs []rec, tooLarge bool) {
	type line struct {
		text, raw []byte
		ended     bool // the line has its line ending
	}
	var lines []line
	for i := 0; i < len(in); {
		j := i
		for j < len(in) && in[j] != '\n' && in[j] != '\r' {
			j++
		}
		k := j
		switch {
		case k == len(in):
		case in[k] == '\r' && k+1 < len(in) && in[k+1] == '\n':
			k += 2
		default:
			k++
		}
		lines = append(lines, line{text: in[i:j], raw: in[i:k], ended: k > j})
		i = k
	}
	if len(lines) > 0 {
		lines[0].text = bytes.TrimPrefix(lines[0].text, []byte("\xEF\xBB\xBF"))
	}
	id := ""
	var (
		raw      []byte
		name     string
		data     []string
		retry    string
		comments int
	)
	emit := func(unterminated bool) bool {
		if len(raw) > maxSize {
			return false
		}
		e := rec{Name: name, ID: id, Retry: retry, Comments: comments, Unterminated: unterminated, Raw: string(raw)}
		if data != nil {
			e.HasData = true
			e.Data = strings.Join(data, "\n")
		}
		evs = append(evs, e)
		raw, name, data, retry, comments = nil, "", nil, "", 0
		return true
	}
	for _, l := range lines {
		raw = append(raw, l.raw...)
		text := string(l.text)
		switch {
		case text == "" && l.ended:
			if !emit(false) {
				return evs, true
			}
			continue
		case strings.HasPrefix(text, ":"):
			comments++
			continue
		}
		field, value, _ := strings.Cut(text, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			name = value
		case "data":
			data = append(data, value)
		case "id":
			if !strings.Contains(value, "\x00") {
				id = value
			}
		case "retry":
			if value != "" && strings.Trim(value, "0123456789") == "" {
				n, err := strconv.ParseInt(value, 10, 64)
				if err != nil { // out of range: ParseInt returns the saturated value
					n = math.MaxInt64
				}
				retry = strconv.FormatInt(n, 10)
			}
		}
	}
	if len(raw) > 0 && !emit(true) {
		return evs, true
	}
	return evs, false
}
