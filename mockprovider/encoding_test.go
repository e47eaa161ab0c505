package mockprovider

import (
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
	"github.com/tidwall/gjson"
)

// decoder reads body in coding, as a client that decodes it would.
func decoder(t testing.TB, coding string, body io.Reader) io.Reader {
	t.Helper()
	switch coding {
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			t.Fatal(err)
		}
		return zr
	case "deflate":
		zr, err := zlib.NewReader(body)
		if err != nil {
			t.Fatal(err)
		}
		return zr
	case "br":
		return brotli.NewReader(body)
	case "zstd":
		zr, err := zstd.NewReader(body)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(zr.Close)
		return zr
	}
	t.Fatalf("no decoder for %q", coding)
	return nil
}

// nonStreamed is turnBodies without "stream": true.
func nonStreamed(body string) string { return strings.Replace(body, `"stream":true,`, "", 1) }

// A turn's Encoding compresses its reply, streamed (each event flushed)
// or not, in every API and whatever the request accepts; decoded, it is
// the reply the mock sends uncompressed.
func TestEncoding(t *testing.T) {
	for _, api := range []API{APIAnthropic, APIChat, APIResponses} {
		for _, c := range Codings {
			for _, streamed := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/%s/streamed=%v", api, c, streamed), func(t *testing.T) {
					_, url := newMock(t, Options{})
					tb := turnBodies[api]
					body := tb.body
					if !streamed {
						body = nonStreamed(body)
					}
					resp := post(t, testContext(t), url+tb.path, body, HeaderTurn, `{"kind":"tool","encoding":"`+c+`"}`, "Accept-Encoding", "identity")
					if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != c || resp.Header.Get("Content-Length") != "" && streamed {
						t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Header)
					}
					dec := decoder(t, c, resp.Body)
					if streamed {
						events, err := readAllEvents(dec)
						if err != nil || len(events) < 3 {
							t.Fatalf("%d events, %v", len(events), err)
						}
						return
					}
					b, err := io.ReadAll(dec)
					if err != nil || !gjson.ValidBytes(b) || !strings.Contains(string(b), "call") && !strings.Contains(string(b), "tool_use") {
						t.Fatalf("body %s, %v", b, err)
					}
				})
			}
		}
	}
}

// An error reply goes in the turn's Encoding too.
func TestEncodingOfAnError(t *testing.T) {
	_, url := newMock(t, Options{})
	tb := turnBodies[APIAnthropic]
	resp := post(t, testContext(t), url+tb.path, tb.body, HeaderTurn, `{"kind":"http_error","status":429,"encoding":"br"}`, "Accept-Encoding", "identity")
	if resp.StatusCode != 429 || resp.Header.Get("Content-Encoding") != "br" {
		t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Header)
	}
	b, err := io.ReadAll(decoder(t, "br", resp.Body))
	if err != nil || gjson.GetBytes(b, "error.type").String() != "rate_limit_error" {
		t.Fatalf("body %s, %v", b, err)
	}
}

// The faults break the compressed bytes; an unknown coding is only a
// header.
func TestEncodingFaults(t *testing.T) {
	tb := turnBodies[APIAnthropic]
	for _, streamed := range []bool{true, false} {
		body := tb.body
		if !streamed {
			body = nonStreamed(body)
		}
		for _, c := range Codings {
			t.Run(fmt.Sprintf("cut/%s/streamed=%v", c, streamed), func(t *testing.T) {
				_, url := newMock(t, Options{})
				resp := post(t, testContext(t), url+tb.path, body, HeaderTurn, `{"kind":"tool","encoding":"`+c+`","encoding_fault":"cut"}`, "Accept-Encoding", "identity")
				raw, err := io.ReadAll(resp.Body)
				if err != nil || resp.Header.Get("Content-Encoding") != c {
					t.Fatalf("the body did not end cleanly (%v) or headers %v", err, resp.Header)
				}
				if _, err := io.ReadAll(decoder(t, c, strings.NewReader(string(raw)))); !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("decoding a cut body: %v", err)
				}
			})
		}
		t.Run(fmt.Sprintf("plain/streamed=%v", streamed), func(t *testing.T) {
			_, url := newMock(t, Options{})
			resp := post(t, testContext(t), url+tb.path, body, HeaderTurn, `{"kind":"tool","encoding":"zstd","encoding_fault":"plain"}`, "Accept-Encoding", "identity")
			raw, err := io.ReadAll(resp.Body)
			if err != nil || resp.Header.Get("Content-Encoding") != "zstd" || !strings.Contains(string(raw), "tool_use") {
				t.Fatalf("%v, headers %v, body %s", err, resp.Header, raw)
			}
		})
		t.Run(fmt.Sprintf("unknown/streamed=%v", streamed), func(t *testing.T) {
			_, url := newMock(t, Options{})
			resp := post(t, testContext(t), url+tb.path, body, HeaderTurn, `{"kind":"tool","encoding":"gzip, foo"}`, "Accept-Encoding", "identity")
			raw, err := io.ReadAll(resp.Body)
			if err != nil || resp.Header.Get("Content-Encoding") != "gzip, foo" || !strings.Contains(string(raw), "tool_use") {
				t.Fatalf("%v, headers %v, body %s", err, resp.Header, raw)
			}
		})
	}
}

func TestEncodingFaultNeedsACompressedReply(t *testing.T) {
	for _, spec := range []TurnSpec{{EncodingFault: FaultCut}, {Encoding: "foo", EncodingFault: FaultPlain}, {Encoding: "gzip", EncodingFault: "torn"}} {
		if err := spec.validate("turn"); !errors.Is(err, ErrInvalidScript) || !strings.Contains(err.Error(), "encoding_fault") {
			t.Errorf("%+v: %v", spec, err)
		}
	}
	if err := (&TurnSpec{Encoding: "br", EncodingFault: FaultPlain}).validate("turn"); err != nil {
		t.Error(err)
	}
}
