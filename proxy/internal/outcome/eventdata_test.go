package outcome_test

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"gatekeeper/meter"
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/proxy/internal/shape"
	"gatekeeper/trajectory"
)

// The reference TurnData's JSON is held to: the map a turn's event data
// was, as EventData built it, shape.Note added to it and a late settle
// changed it, written by json.Marshal.

func mapEventData(o outcome.Turn, call, model, provider string, took time.Duration, charge meter.Charge) map[string]any {
	data := map[string]any{
		"stop": o.Stop, "status": o.Status, "model": model, "provider": provider,
		"duration_ms": took.Milliseconds(), "estimated": o.Estimated,
		"usage": o.Usage, "dollars": charge.Dollars(), "call": call,
	}
	if !o.Upstream && !charge.Priced {
		data["fallback_priced"] = true
	}
	if len(o.Calls) > 0 {
		data["tool_calls"] = mapCalls(o.Calls)
	}
	if len(o.Hosted) > 0 {
		data["hosted_calls"] = mapCalls(o.Hosted)
	}
	if o.Detail != "" {
		data["detail"] = o.Detail
	}
	return data
}

func mapCalls(cs []trajectory.PendingCall) []map[string]string {
	calls := make([]map[string]string, len(cs))
	for i, c := range cs {
		calls[i] = map[string]string{"id": c.ID, "name": c.Name}
	}
	return calls
}

func mapNote(data map[string]any, stage meter.Stage, removed []string, loop trajectory.LoopStep) {
	if stage != "" && stage != meter.Nominal {
		data["stage"] = stage
	}
	if len(removed) > 0 {
		data["removed_tools"] = strings.Join(removed, ",")
	}
	if loop != "" {
		data["loop_step"] = loop
	}
}

func mapLate(data map[string]any) {
	data["late"] = true
	detail, _ := data["detail"].(string)
	data["detail"] = strings.TrimPrefix(detail+"; ", "; ") +
		"the call had been taken for lost and its reservation released; its reply arrived later and is charged"
}

// dataMap is d as that map, for values EventData does not make (dollars
// no charge gives, say).
func dataMap(d outcome.TurnData) map[string]any {
	data := map[string]any{
		"stop": d.Stop, "status": d.Status, "model": d.Model, "provider": d.Provider,
		"duration_ms": d.DurationMS, "estimated": d.Estimated,
		"usage": d.Usage, "dollars": d.Dollars, "call": d.Call,
	}
	if d.FallbackPriced {
		data["fallback_priced"] = true
	}
	if len(d.ToolCalls) > 0 {
		data["tool_calls"] = mapCalls(d.ToolCalls)
	}
	if len(d.HostedCalls) > 0 {
		data["hosted_calls"] = mapCalls(d.HostedCalls)
	}
	if d.Detail != "" {
		data["detail"] = d.Detail
	}
	if d.Stage != "" {
		data["stage"] = d.Stage
	}
	if len(d.RemovedTools) > 0 {
		data["removed_tools"] = strings.Join(d.RemovedTools, ",")
	}
	if d.LoopStep != "" {
		data["loop_step"] = d.LoopStep
	}
	if d.Late {
		data["late"] = true
	}
	return data
}

// sameJSON fails t unless AppendJSON, MarshalJSON and json.Marshal of d
// write exactly what json.Marshal writes of ref, or refuse what it refuses
// with the same error.
func sameJSON(t testing.TB, d outcome.TurnData, ref map[string]any) {
	t.Helper()
	want, wantErr := json.Marshal(ref)
	got, err := d.MarshalJSON()
	switch {
	case wantErr != nil && err == nil:
		t.Fatalf("MarshalJSON wrote %s, want error %v", got, wantErr)
	case wantErr != nil && err.Error() != wantErr.Error():
		t.Fatalf("MarshalJSON error %q, want %q", err, wantErr)
	case wantErr == nil && err != nil:
		t.Fatalf("MarshalJSON error %v, want %s", err, want)
	case !bytes.Equal(got, want):
		t.Fatalf("MarshalJSON differs from encoding/json:\n got %s\nwant %s", got, want)
	}
	// Appending keeps what dst held, and leaves it alone on error.
	prefix := []byte("prefix")
	app, err := d.AppendJSON(prefix)
	if wantErr != nil {
		if err == nil || !bytes.Equal(app, prefix) {
			t.Fatalf("AppendJSON = %q, %v where encoding/json refuses", app, err)
		}
		return
	}
	if err != nil || !bytes.Equal(app, append([]byte("prefix"), want...)) {
		t.Fatalf("AppendJSON = %q, %v; want prefix then %s", app, err, want)
	}
	if via, err := json.Marshal(d); err != nil || !bytes.Equal(via, want) {
		t.Fatalf("json.Marshal = %s, %v; want %s", via, err, want)
	}
}

// turnCase is a turn's event data as a turn makes it.
type turnCase struct {
	o                     outcome.Turn
	call, model, provider string
	took                  time.Duration
	charge                meter.Charge
	stage                 meter.Stage
	removed               []string
	loop                  trajectory.LoopStep
	late                  bool
}

// sameTurn fails t unless the turn's TurnData, as EventData, shape.Note
// and a late settle make it, is written as the map was.
func sameTurn(t testing.TB, c turnCase) {
	t.Helper()
	ref := mapEventData(c.o, c.call, c.model, c.provider, c.took, c.charge)
	mapNote(ref, c.stage, c.removed, c.loop)
	d := c.o.EventData(c.call, c.model, c.provider, c.took, c.charge)
	shape.Note(&d, c.stage, c.removed, c.loop)
	if c.late {
		mapLate(ref)
		d.MarkLate()
	}
	sameJSON(t, d, ref)
	sameJSON(t, d, dataMap(d))
}

// odd are strings encoding/json escapes or passes as they are.
var odd = []string{"", "a", "end_turn", "claude-sonnet-4-5", "<tag>&", `"quoted" \ back`, "line\nbreak\ttab\r\b\f",
	"\x00\x01\x1f\x7f", "é", "日本語", "\u2028\u2029", "\xff", "\xe2\x80", "a\xc0\xafb", "😀", "toolu_01ABC", "; ",
	"mcp__server__read_file"}

// oddFloats are floats at the edges of encoding/json's forms.
var oddFloats = []float64{0, math.Copysign(0, -1), 1, -1, 1e-7, -1e-7, 1e-6, 9.99999e-7, 0.000099, 1e20, 1e21, -1e21,
	9.999999999999999e20, 123456789.123, 0.0025, 4.026e-3, 1e-300, 5e-324, math.MaxFloat64, -math.MaxFloat64,
	float64(math.MaxInt64), 1.5e308, 0.1 + 0.2}

var oddInts = []int64{0, 1, -1, 1500, math.MaxInt64, math.MinInt64, 1 << 53, -(1 << 53) - 1, 999999999999}

func TestTurnDataJSONTable(t *testing.T) {
	calls := []trajectory.PendingCall{{ID: "toolu_1", Name: "bash"}, {ID: "<&>", Name: "\u2028é"}}
	usage := trajectory.Usage{InputTokens: 100, CachedInputTokens: 5, CacheWriteTokens: 7, OutputTokens: 20}
	full := trajectory.Usage{InputTokens: math.MaxInt64, CachedInputTokens: -1, CacheWriteTokens: 3, OutputTokens: 4,
		CacheWrite1hTokens: 2, ServiceTier: "priority<>"}
	turns := []turnCase{
		{o: outcome.Turn{Stop: "end_turn", Status: 200}, call: "c1", model: "m", provider: "anthropic",
			took: 1234 * time.Millisecond, charge: meter.Charge{Micros: 4026, Priced: true}},
		{o: outcome.Turn{}, charge: meter.Charge{Priced: true}},
		{o: outcome.Turn{}},
		{o: outcome.Turn{Upstream: true, Stop: "error", Status: 529, Estimated: true, Detail: "upstream said <no>"}},
		{o: outcome.Turn{Stop: "tool_use", Calls: calls[:1], Usage: usage}, charge: meter.Charge{Micros: 1}},
		{o: outcome.Turn{Stop: "tool_use", Calls: calls, Hosted: calls[1:], Usage: full, Detail: "d"},
			charge: meter.Charge{Micros: math.MaxInt64}},
		{o: outcome.Turn{Hosted: calls}, took: -5 * time.Second, charge: meter.Charge{Micros: -2500}},
		{o: outcome.Turn{Stop: "end_turn"}, took: time.Duration(math.MaxInt64), stage: meter.Restrict,
			removed: []string{"Bash", "Write"}, loop: trajectory.LoopSteer},
		{o: outcome.Turn{}, stage: meter.Nominal, removed: []string{""}},
		{o: outcome.Turn{}, stage: "\xff", removed: []string{"a", "<b>"}, loop: "é"},
		{o: outcome.Turn{Detail: "cut"}, late: true},
		{o: outcome.Turn{}, late: true},
		{o: outcome.Turn{Stop: "canceled", Detail: "client went away", Estimated: true, Status: -1}, call: "\x00",
			model: "\u2029", provider: `"`, late: true, stage: meter.Halt},
		{o: outcome.Turn{Status: math.MaxInt}, charge: meter.Charge{Micros: math.MinInt64}},
		{o: outcome.Turn{Status: math.MinInt}, charge: meter.Charge{Micros: 99}},
	}
	for _, s := range odd {
		turns = append(turns, turnCase{o: outcome.Turn{Stop: s, Detail: s, Model: s, Calls: []trajectory.PendingCall{{ID: s, Name: s}},
			Usage: trajectory.Usage{ServiceTier: s}}, call: s, model: s, provider: s, stage: meter.Stage(s),
			removed: []string{s, s}, loop: trajectory.LoopStep(s)})
	}
	for i, c := range turns {
		sameTurn(t, c)
		c.late = !c.late
		sameTurn(t, c)
		if t.Failed() {
			t.Fatalf("case %d", i)
		}
	}

	var datas []outcome.TurnData
	for _, f := range oddFloats {
		datas = append(datas, outcome.TurnData{Dollars: f}, outcome.TurnData{Dollars: -f})
	}
	for _, n := range oddInts {
		datas = append(datas, outcome.TurnData{DurationMS: n, Status: int(n), Usage: trajectory.Usage{InputTokens: n,
			CachedInputTokens: n, CacheWriteTokens: n, OutputTokens: n, CacheWrite1hTokens: n}})
	}
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		datas = append(datas, outcome.TurnData{Dollars: f}, outcome.TurnData{Dollars: f, Detail: "x", Late: true})
	}
	for _, d := range datas {
		sameJSON(t, d, dataMap(d))
	}
}

func randomTurnCase(rng *rand.Rand) turnCase {
	str := func() string {
		if rng.IntN(3) == 0 {
			return ""
		}
		if rng.IntN(4) == 0 {
			b := make([]byte, rng.IntN(12))
			for i := range b {
				b[i] = byte(rng.IntN(256))
			}
			return string(b)
		}
		return odd[rng.IntN(len(odd))]
	}
	num := func() int64 {
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return oddInts[rng.IntN(len(oddInts))]
		case 2:
			return int64(rng.Uint64())
		}
		return rng.Int64N(100000)
	}
	calls := func() []trajectory.PendingCall {
		n := rng.IntN(4)
		if n == 0 {
			return nil
		}
		cs := make([]trajectory.PendingCall, n)
		for i := range cs {
			cs[i] = trajectory.PendingCall{ID: str(), Name: str()}
		}
		return cs
	}
	c := turnCase{
		o: outcome.Turn{Stop: str(), Status: int(num()), Upstream: rng.IntN(4) == 0, Estimated: rng.IntN(2) == 0,
			Detail: str(), Model: str(), Calls: calls(), Hosted: calls(),
			Usage: trajectory.Usage{InputTokens: num(), CachedInputTokens: num(), CacheWriteTokens: num(), OutputTokens: num(),
				CacheWrite1hTokens: num(), ServiceTier: str()}},
		call: str(), model: str(), provider: str(), took: time.Duration(num()),
		charge: meter.Charge{Micros: num(), Priced: rng.IntN(2) == 0},
		stage:  []meter.Stage{"", meter.Nominal, meter.Restrict, meter.Halt, "x<"}[rng.IntN(5)],
		loop:   trajectory.LoopStep(str()), late: rng.IntN(3) == 0,
	}
	for range rng.IntN(3) {
		c.removed = append(c.removed, str())
	}
	return c
}

func randomFloat(rng *rand.Rand) float64 {
	switch rng.IntN(4) {
	case 0:
		return oddFloats[rng.IntN(len(oddFloats))]
	case 1:
		return math.Float64frombits(rng.Uint64()) // NaN and infinities now and then
	case 2:
		return (rng.Float64() - 0.5) * math.Pow(10, float64(rng.IntN(60)-30))
	}
	return float64(rng.Int64N(1e9)) / 1e6
}

func TestTurnDataJSONRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for range n {
		c := randomTurnCase(rng)
		sameTurn(t, c)
		d := c.o.EventData(c.call, c.model, c.provider, c.took, c.charge)
		shape.Note(&d, c.stage, c.removed, c.loop)
		d.Dollars = randomFloat(rng)
		d.Late = rng.IntN(2) == 0
		sameJSON(t, d, dataMap(d))
	}
}

// FuzzTurnDataJSON builds a turn from the fuzzer's values, each field set
// or left zero by a bit of set, and compares its event data's JSON with
// what encoding/json writes of the map.
func FuzzTurnDataJSON(f *testing.F) {
	f.Add("end_turn", "claude-sonnet-4-5", "anthropic", uint64(0), int64(0), int64(4026), 0.004026)
	f.Add("tool_use", "toolu_1", "bash", uint64(math.MaxUint64), int64(1500), int64(2500), 1e21)
	f.Add("<tag>&\u2028", "\xff\x00\"\\", "é", uint64(0x5555555555555555), int64(-1), int64(-7), 1e-7)
	f.Add("a", "", "; ", uint64(0xaaaaaaaaaaaaaaaa), int64(math.MaxInt64), int64(math.MinInt64), 0.000099)
	f.Add("", "restrict", "steer", uint64(1), int64(math.MinInt64), int64(0), math.NaN())
	f.Add("\xe2\x80", "\u2029", "😀", uint64(0x0123456789abcdef), int64(1<<53), int64(1<<53+1), -math.MaxFloat64)
	f.Fuzz(func(t *testing.T, s1, s2, s3 string, set uint64, n, micros int64, dollars float64) {
		bit := 0
		on := func() bool { bit++; return set&(1<<(bit%64)) != 0 }
		str := func(s string) string {
			if on() {
				return s
			}
			return ""
		}
		num := func() int64 {
			if on() {
				return n
			}
			return 0
		}
		calls := func() []trajectory.PendingCall {
			if !on() {
				return nil
			}
			cs := []trajectory.PendingCall{{ID: s1, Name: s2}}
			if on() {
				cs = append(cs, trajectory.PendingCall{ID: str(s3), Name: str(s1)})
			}
			return cs
		}
		c := turnCase{
			o: outcome.Turn{Stop: str(s1), Status: int(num()), Upstream: on(), Estimated: on(), Detail: str(s2),
				Model: str(s3), Calls: calls(), Hosted: calls(),
				Usage: trajectory.Usage{InputTokens: num(), CachedInputTokens: num(), CacheWriteTokens: num(),
					OutputTokens: num(), CacheWrite1hTokens: num(), ServiceTier: str(s3)}},
			call: s1, model: str(s2), provider: str(s3), took: time.Duration(num()),
			charge: meter.Charge{Micros: micros, Priced: on()}, stage: meter.Stage(str(s2)),
			loop: trajectory.LoopStep(str(s3)), late: on(),
		}
		if on() {
			c.removed = []string{s1, str(s2)}
		}
		sameTurn(t, c)
		d := c.o.EventData(c.call, c.model, c.provider, c.took, c.charge)
		shape.Note(&d, c.stage, c.removed, c.loop)
		d.Dollars, d.Late = dollars, on()
		sameJSON(t, d, dataMap(d))
	})
}

// TestTurnDataJSONCoversEveryField: each field of TurnData, and of the
// usage it holds, changes its JSON, so that a field added to either but
// not to AppendJSON (or to this test's map) fails here rather than going
// unwritten.
func TestTurnDataJSONCoversEveryField(t *testing.T) {
	zero, err := (outcome.TurnData{}).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	set := func(v reflect.Value) {
		switch v.Kind() {
		case reflect.String:
			v.SetString("x")
		case reflect.Int, reflect.Int64:
			v.SetInt(7)
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Float64:
			v.SetFloat(1.5)
		case reflect.Slice:
			s := reflect.MakeSlice(v.Type(), 1, 1)
			if e := s.Index(0); e.Kind() == reflect.Struct {
				e.Field(0).SetString("x")
			} else {
				e.SetString("x")
			}
			v.Set(s)
		default:
			t.Fatalf("no value for a %s", v.Type())
		}
	}
	typ := reflect.TypeFor[outcome.TurnData]()
	for i := range typ.NumField() {
		var d outcome.TurnData
		f := reflect.ValueOf(&d).Elem().Field(i)
		if f.Kind() == reflect.Struct {
			for j := range f.NumField() {
				var u outcome.TurnData
				set(reflect.ValueOf(&u).Elem().Field(i).Field(j))
				if got, _ := u.MarshalJSON(); bytes.Equal(got, zero) {
					t.Errorf("%s.%s does not change the JSON", typ.Field(i).Name, f.Type().Field(j).Name)
				}
				sameJSON(t, u, dataMap(u))
			}
			continue
		}
		set(f)
		if got, _ := d.MarshalJSON(); bytes.Equal(got, zero) {
			t.Errorf("%s does not change the JSON", typ.Field(i).Name)
		}
		sameJSON(t, d, dataMap(d))
	}
}

// BenchmarkTurnEventData: a turn's event data built and written, as the
// map through encoding/json and as TurnData through AppendJSON.
func BenchmarkTurnEventData(b *testing.B) {
	cases := []struct {
		name string
		c    turnCase
	}{
		{"end_turn", turnCase{o: outcome.Turn{Stop: "end_turn", Status: 200, Model: "claude-sonnet-4-5",
			Usage: trajectory.Usage{InputTokens: 31, OutputTokens: 256}}, call: "ac6cb043c625a2f0",
			model: "claude-sonnet-4-5", provider: "anthropic", took: 1234 * time.Millisecond,
			charge: meter.Charge{Micros: 4026, Priced: true}}},
		{"tool_use", turnCase{o: outcome.Turn{Stop: "tool_use", Status: 200, Model: "claude-sonnet-4-5",
			Calls: []trajectory.PendingCall{{ID: "toolu_01A09q90qw90lq917835lq9", Name: "bash"}},
			Usage: trajectory.Usage{InputTokens: 1200, CachedInputTokens: 30000, CacheWriteTokens: 800, OutputTokens: 512}},
			call: "ac6cb043c625a2f0", model: "claude-sonnet-4-5", provider: "anthropic", took: 5321 * time.Millisecond,
			charge: meter.Charge{Micros: 24567, Priced: true}, loop: trajectory.LoopSteer}},
	}
	for _, bc := range cases {
		c := bc.c
		b.Run(bc.name+"/map", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				data := mapEventData(c.o, c.call, c.model, c.provider, c.took, c.charge)
				mapNote(data, c.stage, c.removed, c.loop)
				if _, err := json.Marshal(data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"/typed", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				data := c.o.EventData(c.call, c.model, c.provider, c.took, c.charge)
				shape.Note(&data, c.stage, c.removed, c.loop)
				if _, err := data.MarshalJSON(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
