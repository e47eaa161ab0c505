package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"gatekeeper/telemetry"
	"gatekeeper/trajectory"
)

// syncBuffer is a log sink the handler writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(msg string) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// A run hammered with refusals: each refused request is a log line with
// its tenant, run and reason, and a count in gatekeeper_refusals_total;
// the run's record gets one refused event per refusal window, the next
// one saying how many refusals it folded.
func TestRefusalsVisible(t *testing.T) {
	tel, err := telemetry.New(context.Background(), telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	var logs syncBuffer
	e := newEnv(t, envOpts{tel: tel, log: &logs})
	e.seed(t, "spent", 1.0, 1.0)

	const hammer = 5
	for range hammer {
		resp := e.do(t, "POST", "/t/spent/anthropic/v1/messages", anthropicReq(false, "again"), hdr("X-Mock-Turn", `{"kind":"text"}`)...)
		readAll(t, resp)
		if resp.StatusCode != http.StatusPaymentRequired {
			t.Fatalf("status %d, want 402", resp.StatusCode)
		}
	}
	// Another kind: a key that names no tenant.
	readAll(t, e.do(t, "POST", "/anthropic/v1/messages", anthropicReq(false, "x"), "x-api-key", "not-a-key", "content-type", "application/json"))

	lines := logs.lines("request refused")
	if len(lines) != hammer+1 {
		t.Fatalf("%d refusal log lines, want %d", len(lines), hammer+1)
	}
	for _, l := range lines[:hammer] {
		if l["tenant"] != "team-a" || l["trajectory"] != "spent" || l["reason"] != "budget_exceeded" || l["status"] != float64(402) {
			t.Fatalf("refusal log line %v", l)
		}
	}
	if l := lines[hammer]; l["tenant"] != "" || l["reason"] != "authentication_error" || l["status"] != float64(401) {
		t.Fatalf("unauthenticated refusal's log line %v", l)
	}

	if got := scrapeCounter(t, tel, "gatekeeper_refusals_total", map[string]string{"tenant": "team-a", "reason": "budget_exceeded"}); got != hammer {
		t.Errorf("gatekeeper_refusals_total{team-a,budget_exceeded} = %v, want %d", got, hammer)
	}
	if got := scrapeCounter(t, tel, "gatekeeper_refusals_total", map[string]string{"tenant": "", "reason": "authentication_error"}); got != 1 {
		t.Errorf("gatekeeper_refusals_total{\"\",authentication_error} = %v, want 1", got)
	}

	refused := func() []map[string]any { return e.eventsOf(t, "spent", trajectory.EventRefused) }
	if evs := refused(); len(evs) != 1 || evs[0]["status"] != float64(402) || evs[0]["reason"] != "budget_exceeded" || evs[0]["folded"] != float64(0) {
		t.Fatalf("refused events after %d refusals in one window: %v, want one", hammer, evs)
	}
	// The window passes: the next refusal writes an event folding the
	// ones that had none.
	e.clk.advance(11 * time.Second)
	readAll(t, e.do(t, "POST", "/t/spent/anthropic/v1/messages", anthropicReq(false, "again"), hdr("X-Mock-Turn", `{"kind":"text"}`)...))
	if evs := refused(); len(evs) != 2 || evs[1]["folded"] != float64(hammer-1) {
		t.Fatalf("refused events after the window: %v, want a second one folding %d", evs, hammer-1)
	}
}

// scrapeCounter sums the counter name's series whose labels match, as
// /metrics exposes them.
func scrapeCounter(t *testing.T, tel *telemetry.Telemetry, name string, match map[string]string) float64 {
	t.Helper()
	srv := httptest.NewServer(tel.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	f, ok := fams[name]
	if !ok {
		t.Fatalf("no metric %s in:\n%s", name, body)
	}
	var v float64
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		ok := true
		for k, want := range match {
			ok = ok && labels[k] == want
		}
		if ok {
			v += m.GetCounter().GetValue()
		}
	}
	return v
}
