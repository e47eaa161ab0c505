package coding

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"

	"gatekeeper/proxy/relay"
)

var codings = []string{Gzip, Deflate, Brotli, Zstd}

// flushWriter is a compressor that can hand out what it has so far.
type flushWriter interface {
	io.WriteCloser
	Flush() error
}

func compressor(t testing.TB, coding string, w io.Writer) flushWriter {
	t.Helper()
	switch coding {
	case Gzip:
		return gzip.NewWriter(w)
	case Deflate:
		return zlib.NewWriter(w)
	case Brotli:
		return brotli.NewWriter(w)
	case Zstd:
		zw, err := zstd.NewWriter(w, zstd.WithEncoderConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		return zw
	}
	t.Fatalf("no compressor for %q", coding)
	return nil
}

// compress is chunks in coding, flushed after each.
func compress(t testing.TB, coding string, chunks ...[]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := compressor(t, coding, &buf)
	for _, c := range chunks {
		if _, err := zw.Write(c); err != nil {
			t.Fatal(err)
		}
		if err := zw.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func reply(enc string, body []byte) *http.Response {
	h := http.Header{"Content-Type": {"application/json"}, "Content-Length": {fmt.Sprint(len(body))}}
	if enc != "" {
		h["Content-Encoding"] = strings.Split(enc, "\n")
	}
	return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}
}

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		name, header string // "\n" separates header lines
		want         string
		refused      bool
	}{
		{"none", "", "", false},
		{"identity", "identity", "", false},
		{"identity in capitals", "Identity", "", false},
		{"gzip", "gzip", Gzip, false},
		{"gzip in capitals, spaced", " GZIP ", Gzip, false},
		{"x-gzip", "x-gzip", Gzip, false},
		{"deflate", "deflate", Deflate, false},
		{"br", "br", Brotli, false},
		{"zstd", "zstd", Zstd, false},
		{"an empty list element", "gzip, ", Gzip, false},
		{"unknown", "foo", "", true},
		{"compress", "compress", "", true},
		{"stacked with an unknown", "gzip, foo", "", true},
		{"stacked known", "gzip, br", "", true},
		{"gzip twice", "gzip, gzip", "", true},
		{"stacked on two lines", "gzip\nbr", "", true},
		{"identity stacked", "gzip, identity", "", true},
		{"with a parameter", "gzip;q=1", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.header != "" {
				h["Content-Encoding"] = strings.Split(tc.header, "\n")
			}
			got, err := Of(h)
			var ce *Error
			if tc.refused != errors.As(err, &ce) || tc.refused != errors.Is(err, ErrCoding) {
				t.Fatalf("Of(%q) error %v, refused %v", tc.header, err, tc.refused)
			}
			if got != tc.want {
				t.Fatalf("Of(%q) = %q, want %q", tc.header, got, tc.want)
			}
		})
	}
	long := strings.Repeat("x", 500)
	_, err := Of(http.Header{"Content-Encoding": {long}})
	var ce *Error
	if !errors.As(err, &ce) || len(ce.Coding) != maxCodingShown {
		t.Fatalf("a long coding is shown whole: %v", err)
	}
}

// Each coding decodes to the bytes compressed, with Content-Encoding and
// the encoded Content-Length gone.
func TestDecode(t *testing.T) {
	body := []byte(strings.Repeat(`{"type":"text","text":"hello"}`, 500))
	for _, c := range codings {
		t.Run(c, func(t *testing.T) {
			resp := reply(c, compress(t, c, body[:100], body[100:]))
			if err := Decode(resp); err != nil {
				t.Fatal(err)
			}
			if resp.Header.Get("Content-Encoding") != "" || resp.Header.Get("Content-Length") != "" || resp.ContentLength != -1 || !resp.Uncompressed {
				t.Fatalf("headers left: %v, length %d", resp.Header, resp.ContentLength)
			}
			got, err := io.ReadAll(resp.Body)
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("decoded %d bytes (want %d), error %v", len(got), len(body), err)
			}
			if n, err := resp.Body.Read(make([]byte, 8)); n != 0 || err != io.EOF {
				t.Fatalf("read after the end: %d, %v", n, err)
			}
		})
	}
	for _, enc := range []string{"", "identity"} {
		resp := reply(enc, body)
		if err := Decode(resp); err != nil || resp.ContentLength != int64(len(body)) {
			t.Fatalf("%q: %v, length %d", enc, err, resp.ContentLength)
		}
		if got, _ := io.ReadAll(resp.Body); !bytes.Equal(got, body) {
			t.Fatalf("%q: body changed", enc)
		}
	}
	resp := reply("gzip, foo", body)
	if err := Decode(resp); !errors.Is(err, ErrCoding) || resp.Header.Get("Content-Encoding") != "gzip, foo" {
		t.Fatalf("a refused coding: %v, headers %v", err, resp.Header)
	}
}

// An event the provider flushed is handed out whole before the provider
// sends anything more: a compressed stream streams.
func TestDecodeHandsOutFlushedEvents(t *testing.T) {
	events := [][]byte{[]byte("event: ping\ndata: {\"type\":\"ping\"}\n\n"), []byte("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")}
	for _, c := range codings {
		t.Run(c, func(t *testing.T) {
			pr, pw := io.Pipe()
			resp := &http.Response{Header: http.Header{"Content-Encoding": {c}}, Body: pr}
			if err := Decode(resp); err != nil {
				t.Fatal(err)
			}
			zw := compressor(t, c, pw)
			type got struct {
				b   []byte
				err error
			}
			reads := make(chan got, 1)
			go func() {
				// Reads until one whole event came out, as the stream's reader does.
				var b []byte
				buf := make([]byte, 4096)
				for !bytes.HasSuffix(b, []byte("\n\n")) {
					n, err := resp.Body.Read(buf)
					b = append(b, buf[:n]...)
					if err != nil {
						reads <- got{b, err}
						return
					}
				}
				reads <- got{b, nil}
			}()
			writeDone := make(chan error, 1)
			go func() {
				if _, err := zw.Write(events[0]); err != nil {
					writeDone <- err
					return
				}
				writeDone <- zw.Flush()
			}()
			select {
			case g := <-reads:
				if g.err != nil || !bytes.Equal(g.b, events[0]) {
					t.Fatalf("first event %q, error %v", g.b, g.err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the flushed event did not come out before the next bytes")
			}
			if err := <-writeDone; err != nil {
				t.Fatal(err)
			}
			go func() {
				_, _ = zw.Write(events[1])
				pw.CloseWithError(zw.Close())
			}()
			rest, err := io.ReadAll(resp.Body)
			if err != nil || !bytes.Equal(rest, events[1]) {
				t.Fatalf("rest %q, error %v", rest, err)
			}
		})
	}
}

// Bytes that are not valid in their coding end the body with ErrDecode,
// never with io.EOF: a cut stream is not a short reply.
func TestDecodeMalformed(t *testing.T) {
	body := []byte(strings.Repeat(`{"type":"tool_use","name":"Bash"}`, 200))
	for _, c := range codings {
		full := compress(t, c, body)
		corrupt := bytes.Clone(full)
		for i := len(corrupt) / 2; i < len(corrupt)/2+16; i++ {
			corrupt[i] ^= 0x5a
		}
		cases := []struct {
			name string
			b    []byte
		}{
			{"empty", nil},
			{"cut in half", full[:len(full)/2]},
			{"its last byte missing", full[:len(full)-1]},
			{"bytes after the stream", append(bytes.Clone(full), "{}"...)},
			{"not compressed", body},
		}
		if c != Brotli { // brotli carries no checksum: a flipped byte may decode
			cases = append(cases, struct {
				name string
				b    []byte
			}{"corrupted", corrupt})
		}
		for _, tc := range cases {
			t.Run(c+"/"+tc.name, func(t *testing.T) {
				resp := reply(c, tc.b)
				if err := Decode(resp); err != nil {
					t.Fatal(err)
				}
				_, err := io.ReadAll(resp.Body)
				if !errors.Is(err, ErrDecode) {
					t.Fatalf("error %v, want ErrDecode", err)
				}
				if n, again := resp.Body.Read(make([]byte, 8)); n != 0 || again != err {
					t.Fatalf("the error is not sticky: %d, %v", n, again)
				}
			})
		}
	}
}

// failingBody gives b, then fails with err.
type failingBody struct {
	b   []byte
	err error
}

func (f *failingBody) Read(p []byte) (int, error) {
	if len(f.b) == 0 {
		return 0, f.err
	}
	n := copy(p, f.b)
	f.b = f.b[n:]
	return n, nil
}

func (f *failingBody) Close() error { return nil }

// A provider whose bytes stop coming is a read error of its own, not a
// malformed reply.
func TestDecodeKeepsReadErrors(t *testing.T) {
	lost := errors.New("connection reset")
	for _, c := range codings {
		t.Run(c, func(t *testing.T) {
			full := compress(t, c, bytes.Repeat([]byte("0123456789abcdef"), 4096))
			resp := &http.Response{Header: http.Header{"Content-Encoding": {c}}, Body: &failingBody{full[:len(full)/2], lost}}
			if err := Decode(resp); err != nil {
				t.Fatal(err)
			}
			_, err := io.ReadAll(resp.Body)
			if !errors.Is(err, lost) || errors.Is(err, ErrDecode) {
				t.Fatalf("error %v, want the read error", err)
			}
		})
	}
}

// Close while a read waits on the provider (Upstream's read aside) ends
// that read; run with -race.
func TestDecodeCloseDuringRead(t *testing.T) {
	for _, c := range codings {
		t.Run(c, func(t *testing.T) {
			pr, pw := io.Pipe()
			defer pw.Close()
			resp := &http.Response{Header: http.Header{"Content-Encoding": {c}}, Body: pr}
			if err := Decode(resp); err != nil {
				t.Fatal(err)
			}
			u := relay.NewUpstream(resp.Body, make([]byte, 512))
			if _, err := u.Read(10 * time.Millisecond); !errors.Is(err, relay.ErrQuiet) {
				t.Fatalf("read of a silent provider: %v", err)
			}
			done := make(chan struct{})
			go func() { _ = u.Close(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Close did not end the read aside")
			}
		})
	}
}

// A body that decodes to far more than a reader takes is decoded no
// further than the reader's bound: decoding holds the coding's window,
// not the reply.
func TestDecodeBombReadToTheBound(t *testing.T) {
	const decodedSize, bound = 16 << 20, 4096
	for _, c := range codings {
		t.Run(c, func(t *testing.T) {
			var buf bytes.Buffer
			var zw io.WriteCloser
			switch c { // the fastest levels: the test makes the bomb, not a small one
			case Gzip:
				zw, _ = gzip.NewWriterLevel(&buf, gzip.BestSpeed)
			case Deflate:
				zw, _ = zlib.NewWriterLevel(&buf, zlib.BestSpeed)
			case Brotli:
				zw = brotli.NewWriterLevel(&buf, brotli.BestSpeed)
			case Zstd:
				zw, _ = zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
			}
			zeros := make([]byte, 1<<20)
			for range decodedSize / len(zeros) {
				_, _ = zw.Write(zeros)
			}
			_ = zw.Close()
			resp := reply(c, buf.Bytes())
			if err := Decode(resp); err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			got, err := io.ReadAll(io.LimitReader(resp.Body, bound+1))
			runtime.ReadMemStats(&after)
			if err != nil || len(got) != bound+1 {
				t.Fatalf("read %d, %v", len(got), err)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > decodedSize*3/4 {
				t.Fatalf("reading %d bytes of a %d-byte bomb allocated %d bytes", bound+1, decodedSize, alloc)
			}
			_ = resp.Body.Close()
		})
	}
}

// FuzzDecode: any body under any coding, raw or compressed and then
// changed at one byte, decodes to bytes or fails with ErrDecode, never
// panics nor reads past its reader's bound; a body compressed and left
// as it is decodes to what was compressed. Seeds run as tests.
func FuzzDecode(f *testing.F) {
	for i, c := range codings {
		f.Add(uint8(i), []byte(`{"type":"message","content":[{"type":"tool_use","name":"Bash","input":{"command":"ls"}}]}`), false, uint16(0), uint8(0))
		f.Add(uint8(i), []byte("data: {\"type\":\"ping\"}\n\n"), true, uint16(3), uint8(0xff))
		f.Add(uint8(i), compress(f, c, []byte("hello"), []byte(" world")), false, uint16(0), uint8(0))
	}
	f.Add(uint8(0), []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}, false, uint16(0), uint8(0))
	f.Add(uint8(3), []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x58}, false, uint16(0), uint8(0))
	f.Fuzz(func(t *testing.T, which uint8, data []byte, encode bool, at uint16, flip uint8) {
		c := codings[int(which)%len(codings)]
		body := data
		if encode {
			body = compress(t, c, data)
			if len(body) > 0 {
				body[int(at)%len(body)] ^= flip
			}
		}
		resp := reply(c, body)
		if err := Decode(resp); err != nil {
			t.Fatal(err)
		}
		const bound = 1 << 20
		got, err := io.ReadAll(io.LimitReader(resp.Body, bound+1))
		if err != nil && !errors.Is(err, ErrDecode) {
			t.Fatalf("error %v does not wrap ErrDecode", err)
		}
		if len(got) > bound+1 {
			t.Fatalf("read %d bytes past the bound", len(got))
		}
		if encode && flip == 0 && (err != nil || !bytes.Equal(got, data)) {
			t.Fatalf("round trip: %d bytes of %d, %v", len(got), len(data), err)
		}
	})
}
