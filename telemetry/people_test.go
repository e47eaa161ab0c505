package telemetry

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"gatekeeper/config"
)

// newPeople is a Telemetry whose person label names at most people.
func newPeople(t *testing.T, people int) *Telemetry {
	t.Helper()
	cfg := config.DefaultConfig().Telemetry
	cfg.MetricsPeople = people
	tel, err := New(t.Context(), Options{Config: cfg, Now: newClock().now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tel.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return tel
}

func personTurn(tel *Telemetry, person, group string, dollars float64) {
	s := sonnetStart
	s.Person, s.Group = person, group
	_, turn := tel.StartTurn(context.Background(), nil, s)
	turn.End(TurnEnd{Stop: "end_turn", InputTokens: 10, OutputTokens: 5, Dollars: dollars})
}

// TestPersonLabels: a person's turn counts its turns, tokens and dollars
// under the person and the group that admitted them; a virtual key's
// turn has neither label; the histograms carry neither.
func TestPersonLabels(t *testing.T) {
	tel := newPeople(t, config.DefaultMetricsPeople)
	personTurn(tel, "ada@example.com", "platform", 0.5)
	personTurn(tel, "ada@example.com", "platform", 0.25)
	personTurn(tel, "", "", 1) // a virtual key

	got := scrape(t, tel)
	ada := `group="platform",model="claude-sonnet-4-5",person="ada@example.com",provider="anthropic-eu",tenant="team-a"`
	want := map[string]float64{
		`gatekeeper_dollars_total{` + ada + `}`:                       0.75,
		`gatekeeper_dollars_total{` + sonnetLabels + `}`:              1,
		`gatekeeper_tokens_total{` + ada + `,type="input"}`:           20,
		`gatekeeper_tokens_total{` + ada + `,type="output"}`:          10,
		`gatekeeper_tokens_total{` + sonnetLabels + `,type="output"}`: 5,
		`gatekeeper_turns_total{group="platform",model="claude-sonnet-4-5",person="ada@example.com",provider="anthropic-eu",stop="end_turn",tenant="team-a"}`: 2,
		`gatekeeper_turns_total{model="claude-sonnet-4-5",provider="anthropic-eu",stop="end_turn",tenant="team-a"}`:                                           1,
		`gatekeeper_turn_duration_seconds_count{` + sonnetLabels + `}`:                                                                                        3,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("missing %s", k)
		} else if math.Abs(g-v) > 1e-9 {
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
	for k := range got {
		if strings.Contains(k, "person=") && !strings.HasPrefix(k, "gatekeeper_turns_total") &&
			!strings.HasPrefix(k, "gatekeeper_tokens_total") && !strings.HasPrefix(k, "gatekeeper_dollars_total") {
			t.Errorf("a person label outside the turns, tokens and dollars: %s", k)
		}
	}
}

// TestPersonLabelIsBounded: past telemetry.metrics_people distinct
// people, later ones count as "other" (their dollars still counted); 0
// leaves the person label out and keeps the group.
func TestPersonLabelIsBounded(t *testing.T) {
	tel := newPeople(t, 3)
	for i := range 10 {
		personTurn(tel, fmt.Sprintf("dev%d@example.com", i), "platform", 1)
	}
	people := map[string]float64{}
	for k, v := range scrape(t, tel) {
		if !strings.HasPrefix(k, "gatekeeper_dollars_total{") {
			continue
		}
		_, after, _ := strings.Cut(k, `person="`)
		p, _, _ := strings.Cut(after, `"`)
		people[p] += v
	}
	if len(people) != 4 || people[otherLabel] != 7 || people["dev0@example.com"] != 1 {
		t.Errorf("dollars by person label = %v, want dev0..dev2 at 1 each and %q at 7", people, otherLabel)
	}

	off := newPeople(t, 0)
	personTurn(off, "ada@example.com", "platform", 2)
	got := scrape(t, off)
	if v := got[`gatekeeper_dollars_total{group="platform",`+sonnetLabels+`}`]; v != 2 {
		t.Errorf("with metrics_people 0, the group's dollars = %v, want 2 (exposition: %v)", v, got)
	}
	for k := range got {
		if strings.Contains(k, "person=") {
			t.Errorf("with metrics_people 0, a person label: %s", k)
		}
	}
}

// TestPersonTurnMetricsAllocateNothing: a person's series, once seen,
// records without allocating, like a virtual key's.
func TestPersonTurnMetricsAllocateNothing(t *testing.T) {
	tel := newPeople(t, config.DefaultMetricsPeople)
	s := sonnetStart
	s.Person, s.Group = "ada@example.com", "platform"
	_, turn := tel.StartTurn(t.Context(), nil, s)
	end := TurnEnd{Stop: "end_turn", InputTokens: 10, OutputTokens: 7, Dollars: 0.01}
	record := func() { turn.record(end, 10, time.Second) }
	record()
	if n := testing.AllocsPerRun(100, record); n != 0 {
		t.Errorf("a person's turn metrics allocate %.1f times, want 0", n)
	}
}
