package telemetry

import (
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metricRow is a metric's row in docs/reference/metrics.md.
var metricRow = regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|")

// TestMetricsReferenceMatchesExposition records once through every
// instrument, scrapes /metrics, and holds the metric families served to
// the table of docs/reference/metrics.md, both ways. The Go runtime's and
// the process's own families (go_*, process_*) are documented as a group.
func TestMetricsReferenceMatchesExposition(t *testing.T) {
	tel, _ := newTraced(t, newClock())
	_, turn := tel.StartTurn(t.Context(), nil, sonnetStart)
	turn.FirstByte()
	turn.End(TurnEnd{Stop: "end_turn", InputTokens: 1, OutputTokens: 1, Dollars: 0.1})
	tel.StageChanged("team-a", "nominal", "steer")
	tel.StateChanged("team-a", "", "READY")
	tel.UpstreamError("anthropic-eu", "timeout")
	tel.Refused("team-a", "budget_exceeded")
	tel.ApprovalPending(1)
	tel.ApprovalDecided("release", "approved", time.Minute)
	tel.QueueWait("batch", time.Second)
	tel.QueueLength("batch", 3)
	tel.Headroom("anthropic/main", 0.5)
	tel.KeyRetried("anthropic")
	tel.RateLimited("batch")
	tel.ConfigReloaded(ReloadApplied)
	tel.CallsSwept(1)
	tel.StoreFailed()

	srv := httptest.NewServer(tel.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	instrumentsServed := 0
	for name := range families {
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
			continue
		}
		served[name] = true
		if name != "target_info" {
			instrumentsServed++
		}
	}

	// Every instrument the process creates was recorded through above: a
	// new one must be added here too, or its family would go unchecked.
	// The operations' instruments count too, and their observable gauge
	// of the oldest pending approval, which no field holds.
	created := 1
	for _, typ := range []reflect.Type{reflect.TypeFor[instruments](), reflect.TypeFor[operations]()} {
		for i := range typ.NumField() {
			if typ.Field(i).Type.PkgPath() == "go.opentelemetry.io/otel/metric" {
				created++
			}
		}
	}
	if created != instrumentsServed {
		t.Fatalf("%d instruments, %d of their families served: record through the new instrument in this test", created, instrumentsServed)
	}

	doc, err := os.ReadFile("../docs/reference/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range metricRow.FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = true
	}
	for name := range served {
		if !documented[name] {
			t.Errorf("metric %s is served on /metrics but not in docs/reference/metrics.md", name)
		}
	}
	for name := range documented {
		if !served[name] {
			t.Errorf("docs/reference/metrics.md documents metric %s, which /metrics does not serve", name)
		}
	}
	if !strings.Contains(string(doc), "`go_") || !strings.Contains(string(doc), "`process_") {
		t.Error("docs/reference/metrics.md does not mention the Go runtime's and the process's metrics")
	}
}
