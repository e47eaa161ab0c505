package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/ and docs/cost-report.svg")

func TestGridStep(t *testing.T) {
	tests := []struct {
		name     string
		hi       float64
		n        int
		integral bool
		want     float64
	}{
		{"nothing spent", 0, 20, false, 1},
		{"dollars", 3.7, 20, false, 0.2},
		{"exact fit", 4, 20, false, 0.2},
		{"cents", 0.09, 20, false, 0.005},
		{"turns never below one", 7, 20, true, 1},
		{"turns", 130, 20, true, 10},
		{"tokens", 1234567, 20, true, 100000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := gridStep(tc.hi, tc.n, tc.integral)
			if math.Abs(s.value()-tc.want) > 1e-12 || s.at(tc.n) < tc.hi {
				t.Errorf("gridStep(%g, %d) = %g (covers %g), want %g", tc.hi, tc.n, s.value(), s.at(tc.n), tc.want)
			}
		})
	}
	if got := (step{1, -1}).at(3); got != 0.3 {
		t.Errorf("3 steps of 0.1 = %v, want 0.3 exactly", got)
	}
}

func TestKnee(t *testing.T) {
	pts := func(fs ...float64) []Point {
		ps := make([]Point, len(fs))
		for i, f := range fs {
			ps[i] = Point{Budget: float64(i), Fraction: f}
		}
		return ps
	}
	tests := []struct {
		name  string
		ps    []Point
		slope float64
		want  int
	}{
		{"rises then flat", pts(0, 0.3, 0.5, 0.6, 0.605, 0.607, 0.607), 0.01, 3},
		{"a plateau before a late rise is not the knee", pts(0, 0.4, 0.4, 0.4, 0.4, 0.7, 0.7), 0.01, 5},
		{"a slow climb that keeps going", pts(0, 0.02, 0.04, 0.06, 0.08), 0.01, 4},
		{"slope is per step", pts(0, 0.5, 0.52, 0.54, 0.56), 0.05, 1},
		{"flat from the start", pts(0, 0, 0, 0), 0.01, 0},
		{"one point", pts(0.5), 0.01, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := knee(tc.ps, tc.slope); got != tc.want {
				t.Errorf("knee = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestQuantileIndex(t *testing.T) {
	tests := []struct {
		n    int
		q    float64
		want int
	}{{1, 0.95, 0}, {10, 0.95, 9}, {20, 0.95, 18}, {100, 0.95, 94}, {100, 0.5, 49}, {3, 1, 2}, {4, 0.01, 0}}
	for _, tc := range tests {
		if got := quantileIndex(tc.n, tc.q); got != tc.want {
			t.Errorf("quantileIndex(%d, %g) = %d, want %d", tc.n, tc.q, got, tc.want)
		}
	}
}

func TestBuildCounts(t *testing.T) {
	runs := []Run{
		{Class: "a", Accepted: true, Turns: 1, Dollars: 0.1},
		{Class: "a", Accepted: true, Turns: 3, Dollars: 0.3},
		{Class: "a", Accepted: false, Turns: 2, Dollars: 0.2},
		{Class: "a", Accepted: true, Turns: 10, Dollars: 1},
		{Class: "", Accepted: false, Turns: 5, Dollars: math.NaN()},
	}
	rep, err := Build(runs, Options{Buckets: 10, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Runs != 5 || len(rep.Classes) != 2 || rep.Classes[0].Class != "" || rep.Classes[1].Class != "a" {
		t.Fatalf("classes %+v", rep.Classes)
	}
	a := rep.Classes[1]
	if a.Runs != 4 || a.Accepted != 3 {
		t.Errorf("class a: %d runs, %d accepted", a.Runs, a.Accepted)
	}
	turns := a.Curves[0]
	if turns.Dimension != Turns || turns.Step != 1 || len(turns.Points) != 11 {
		t.Fatalf("turns curve: step %g, %d points", turns.Step, len(turns.Points))
	}
	// Denominator: every judged run of the class, the rejected one included.
	for _, c := range []struct {
		b      int
		within int
	}{{0, 0}, {1, 1}, {2, 1}, {3, 2}, {9, 2}, {10, 3}} {
		p := turns.Points[c.b]
		if p.Accepted != c.within || p.Fraction != float64(c.within)/4 {
			t.Errorf("F(%d turns) = %d/%g, want %d of 4", c.b, p.Accepted, p.Fraction, c.within)
		}
	}
	dollars := a.Curves[3]
	if p := dollars.Points[3]; p.Budget != 0.3 || p.Accepted != 2 {
		t.Errorf("F($0.3) = %+v: a run of exactly $0.30 is within a $0.30 budget", p)
	}
	if c := turns.Ceiling; c == nil || c.Value != 10 || c.Runs != 3 || c.Low > c.Value || c.High < c.Value {
		t.Errorf("turns ceiling %+v, want 10 resting on 3 runs", c)
	}
	if none := rep.Classes[0]; none.Curves[3].Ceiling != nil || none.Curves[3].Points[0].Fraction != 0 {
		t.Errorf("a class with no accepted run: %+v", none.Curves[3])
	}
	again, _ := Build(runs, Options{Buckets: 10, Seed: 7})
	if !equalJSON(t, rep, again) {
		t.Error("the same runs and seed gave two reports")
	}
	onlyA, _ := Build(runs[:4], Options{Buckets: 10, Seed: 7})
	if *onlyA.Classes[0].Curves[1].Ceiling != *a.Curves[1].Ceiling {
		t.Error("a class's interval changed when another class was left out")
	}
}

func TestBuildOptions(t *testing.T) {
	for _, o := range []Options{{Buckets: -1}, {Slope: 2}, {Quantile: -0.5}, {Level: 1}, {Resamples: 5}} {
		if _, err := Build(nil, o); !errors.Is(err, ErrOptions) {
			t.Errorf("Build with %+v: %v, want ErrOptions", o, err)
		}
	}
	rep, err := Build(nil, Options{})
	if err != nil || rep.Options != DefaultOptions() || rep.Classes == nil {
		t.Errorf("empty build: %+v, %v", rep, err)
	}
}

// TestKneeOnKnownCurve draws populations whose F is known in closed form
// and checks that the knee found from the sample is within one grid step
// of the knee of the true F on the same grid.
func TestKneeOnKnownCurve(t *testing.T) {
	p := population{Class: "c", Mean: 1, P0: 0.9, Lambda: 4}
	for _, slope := range []float64{0.01, 0.02} {
		kneeOnKnownCurve(t, p, Options{Slope: slope})
	}
}

func kneeOnKnownCurve(t *testing.T, p population, o Options) {
	o, _ = o.withDefaults()
	exact, seeds := 0, 30
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 99))
		got := curve(p.draw(rng, 3000, "t"), Dollars, o, p.Class)
		truth := make([]Point, len(got.Points))
		for i, q := range got.Points {
			truth[i] = Point{Budget: q.Budget, Fraction: p.F(q.Budget)}
		}
		want := knee(truth, o.Slope)
		off := math.Abs(got.Knee.Budget-truth[want].Budget) / got.Step
		if off > 1+1e-9 {
			t.Errorf("seed %d: knee at $%g, the true curve's at $%g (step %g)", seed, got.Knee.Budget, truth[want].Budget, got.Step)
		}
		if off < 1e-9 {
			exact++
		}
	}
	t.Logf("knee, slope %g: %d of %d samples on the true knee, the rest one step off", o.Slope, exact, seeds)
}

// TestCeilingCoverage: over 100 seeds, each a fresh population and a
// bootstrap seed of its own, the ceiling's interval holds the true
// quantile of the accepted runs' cost in at least 90% of them.
func TestCeilingCoverage(t *testing.T) {
	p := population{Class: "c", Mean: 1, P0: 0.9, Lambda: 4}
	o, _ := DefaultOptions().withDefaults()
	truth := p.Quantile(o.Quantile)
	covered, seeds := 0, 100
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		o.Seed = uint64(seed) + 1
		c := curve(p.draw(rng, 300, "t"), Dollars, o, p.Class).Ceiling
		if c.Low <= truth && truth <= c.High {
			covered++
		}
	}
	t.Logf("ceiling: the %s interval covered the true %s-quantile ($%.4f) in %d of %d seeds", percent(o.Level), percent(o.Quantile), truth, covered, seeds)
	if covered < seeds*90/100 {
		t.Errorf("coverage %d of %d, want at least 90%%", covered, seeds)
	}
}

func equalJSON(t *testing.T, a, b Report) bool {
	t.Helper()
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// TestExample regenerates the worked example's runs and checks them and
// every output format against the committed files (go test -update
// rewrites them): testdata/runs.jsonl, testdata/example.{txt,json,csv,svg}
// and docs/cost-report.svg, which docs/guide/outcomes.md shows.
func TestExample(t *testing.T) {
	var runs bytes.Buffer
	for _, r := range example() {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		runs.Write(b)
		runs.WriteByte('\n')
	}
	golden(t, "testdata/runs.jsonl", runs.Bytes())

	rep, err := Build(readRuns(t, "testdata/runs.jsonl"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep.Scope = Scope{Since: "720h"}
	for _, f := range []struct {
		file  string
		write func(*bytes.Buffer, Report) error
	}{
		{"testdata/example.txt", func(b *bytes.Buffer, r Report) error { return WriteText(b, r) }},
		{"testdata/example.json", func(b *bytes.Buffer, r Report) error { return WriteJSON(b, r) }},
		{"testdata/example.csv", func(b *bytes.Buffer, r Report) error { return WriteCSV(b, r) }},
		{"testdata/example.svg", func(b *bytes.Buffer, r Report) error { return WriteSVG(b, r) }},
		{"../docs/cost-report.svg", func(b *bytes.Buffer, r Report) error { return WriteSVG(b, r) }},
	} {
		var b bytes.Buffer
		if err := f.write(&b, rep); err != nil {
			t.Fatal(err)
		}
		golden(t, f.file, b.Bytes())
	}

	// The guide's worked example shows the text report as it is.
	guide, err := os.ReadFile("../docs/guide/outcomes.md")
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	_ = WriteText(&text, rep)
	if !bytes.Contains(guide, append(append([]byte("```\n"), text.Bytes()...), "```"...)) {
		t.Error("docs/guide/outcomes.md's worked example is not the text report of testdata/runs.jsonl: paste testdata/example.txt into it")
	}

	// The JSON is the admin API's answer: decoding it gives the report back.
	var js bytes.Buffer
	_ = WriteJSON(&js, rep)
	back, err := Decode(js.Bytes())
	if err != nil || !equalJSON(t, back, rep) {
		t.Errorf("decoding the JSON form: %v", err)
	}
}

func TestSVGReadable(t *testing.T) {
	rep, err := Build(readRuns(t, "testdata/runs.jsonl"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteSVG(&b, rep); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	for _, want := range []string{"budget b (turns)", "budget b (tokens)", "budget b (s)", "budget b (USD)", "accepted within b", "knee ", "ceiling ", "100%", "bugfix", "<polyline"} {
		if !strings.Contains(s, want) {
			t.Errorf("SVG has no %q", want)
		}
	}
	if n := strings.Count(s, "<polyline"); n != 12 {
		t.Errorf("%d curves drawn, want 3 classes × 4 dimensions", n)
	}
	// Well formed: every element the writer opens is closed.
	if strings.Count(s, "<g>") != strings.Count(s, "</g>") || !strings.HasSuffix(s, "</svg>\n") {
		t.Error("unbalanced SVG")
	}
	var none bytes.Buffer
	empty, _ := Build(nil, Options{})
	if err := WriteSVG(&none, empty); err != nil || !strings.Contains(none.String(), "no judged runs") {
		t.Errorf("empty report: %v %s", err, none.String())
	}
}

func readRuns(t *testing.T, path string) []Run {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rs []Run
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r Run
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		rs = append(rs, r)
	}
	return rs
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./report -run TestExample -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from what the test generates; if the change is meant, run go test ./report -run TestExample -update", path)
	}
}
