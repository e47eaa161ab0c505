package replybody_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"gatekeeper/proxy/internal/coding"
	"gatekeeper/proxy/internal/replybody"
)

// closeBody is a reply body that remembers being closed.
type closeBody struct {
	io.Reader
	closed bool
}

func (b *closeBody) Close() error { b.closed = true; return nil }

// failing fails every read with err.
type failing struct{ err error }

func (f failing) Read([]byte) (int, error) { return 0, f.err }

func TestFilter(t *testing.T) {
	upper := func(b []byte) ([]byte, error) { return bytes.ToUpper(b), nil }
	unreadable := func([]byte) ([]byte, error) { return nil, errors.New("not JSON") }
	cases := []struct {
		name    string
		reply   string
		failed  error // the provider's body fails after reply with it
		check   func([]byte) ([]byte, error)
		cutOnly bool
		raw     string // what Filter returns for the turn to decode
		body    string // what the agent reads
		wantErr bool
		closed  bool // the provider's body was closed by Filter
	}{
		{name: "filtered", reply: "abc", check: upper, raw: "abc", body: "ABC", closed: true},
		{name: "cut only, filtered", reply: "abc", check: upper, cutOnly: true, raw: "abc", body: "ABC", closed: true},
		{name: "too large to check", reply: "abcdefghij", check: upper, raw: "abcdefghi", wantErr: true, closed: true},
		{name: "cut only, too large: as it came", reply: "abcdefghij", check: upper, cutOnly: true, body: "abcdefghij"},
		{name: "unreadable", reply: "abc", check: unreadable, raw: "abc", wantErr: true, closed: true},
		{name: "cut only, unreadable: as it came", reply: "abc", check: unreadable, cutOnly: true, raw: "abc", body: "abc", closed: true},
		{name: "cut only, read failed: as it came", reply: "abc", failed: io.ErrUnexpectedEOF, check: upper, cutOnly: true, body: "abc"},
		{name: "cut only, not decodable", reply: "abc", failed: coding.ErrDecode, check: upper, cutOnly: true, raw: "abc", wantErr: true, closed: true},
		{name: "not decodable", reply: "abc", failed: coding.ErrDecode, check: upper, raw: "abc", wantErr: true, closed: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var r io.Reader = strings.NewReader(tc.reply)
			if tc.failed != nil {
				r = io.MultiReader(r, failing{tc.failed})
			}
			src := &closeBody{Reader: r}
			resp := &http.Response{Body: src, Header: http.Header{}, ContentLength: -1}
			raw, err := replybody.Filter(resp, 8, tc.check, tc.cutOnly)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if string(raw) != tc.raw {
				t.Errorf("raw %q, want %q", raw, tc.raw)
			}
			if src.closed != tc.closed {
				t.Errorf("provider's body closed %v, want %v", src.closed, tc.closed)
			}
			if tc.wantErr {
				return
			}
			got, err := io.ReadAll(resp.Body)
			if !errors.Is(err, tc.failed) || string(got) != tc.body {
				t.Fatalf("agent reads %q (%v), want %q (%v)", got, err, tc.body, tc.failed)
			}
			if src.closed {
				if resp.ContentLength != int64(len(tc.body)) || resp.Header.Get("Content-Length") != strconv.Itoa(len(tc.body)) {
					t.Errorf("length %d, header %q, want %d", resp.ContentLength, resp.Header.Get("Content-Length"), len(tc.body))
				}
			}
		})
	}
}

// The last bytes of a filtered reply come with io.EOF, as an HTTP body of
// known length gives them: the turn is recorded before they reach the
// agent.
func TestFilterEOFWithLastBytes(t *testing.T) {
	resp := &http.Response{Body: io.NopCloser(strings.NewReader("abc")), Header: http.Header{}}
	if _, err := replybody.Filter(resp, 8, func(b []byte) ([]byte, error) { return b, nil }, false); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 8)
	if n, err := resp.Body.Read(p); n != 3 || err != io.EOF {
		t.Fatalf("read %d, %v; want 3, io.EOF", n, err)
	}
}
