package mockprovider

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestSeededRepliesRepeat checks that a seed and a clock fix every byte of
// a reply, ids and fragment boundaries included.
func TestSeededRepliesRepeat(t *testing.T) {
	seeds := []uint64{42, 42, 43}
	replies := make([][]byte, len(seeds))
	for i, seed := range seeds {
		_, url := newMock(t, Options{Rand: rand.New(rand.NewPCG(seed, seed)), Clock: newTickClock().Now})
		var all []byte
		for _, api := range []API{APIAnthropic, APIChat, APIResponses} {
			tb := turnBodies[api]
			resp := post(t, testContext(t), url+tb.path, tb.body, HeaderTurn, "thinking_tool")
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, resp.Header.Get("request-id")+resp.Header.Get("x-request-id")...)
			all = append(all, b...)
		}
		replies[i] = all
	}
	if !bytes.Equal(replies[0], replies[1]) {
		t.Error("two servers with the same seed replied differently")
	}
	if bytes.Equal(replies[0], replies[2]) {
		t.Error("a different seed gave the same bytes")
	}
}

// BenchmarkServeHTTP measures the mock's own cost per turn (plan, render,
// write), without a network, for a streamed parallel tool-call turn.
func BenchmarkServeHTTP(b *testing.B) {
	for _, api := range []API{APIAnthropic, APIChat, APIResponses} {
		b.Run(string(api), func(b *testing.B) {
			s := New(Options{Rand: rand.New(rand.NewPCG(1, 1))})
			tb := turnBodies[api]
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, tb.path, strings.NewReader(tb.body))
				req.Header.Set("x-api-key", "k")
				req.Header.Set("Authorization", "Bearer k")
				req.Header.Set(HeaderTurn, "parallel")
				w := httptest.NewRecorder()
				s.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d", w.Code)
				}
				s.Reset()
			}
		})
	}
}
