package trajectory

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// sameJSON fails t unless AppendJSON, MarshalJSON and json.Marshal write
// exactly what the reflective encoder writes, or refuse what it refuses
// with the same error.
func sameJSON(t *testing.T, r *Record) {
	t.Helper()
	want, wantErr := marshalReflect(r)
	got, err := r.MarshalJSON()
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
	app, err := r.AppendJSON(prefix)
	if wantErr != nil {
		if err == nil || !bytes.Equal(app, prefix) {
			t.Fatalf("AppendJSON = %q, %v on a record encoding/json refuses", app, err)
		}
		return
	}
	if err != nil || !bytes.Equal(app, append([]byte("prefix"), want...)) {
		t.Fatalf("AppendJSON = %q, %v; want prefix then %s", app, err, want)
	}

	// Through json.Marshal, as the admin API writes it.
	viaMarshal, err := json.Marshal(r)
	if err != nil || !bytes.Equal(viaMarshal, want) {
		t.Fatalf("json.Marshal = %s, %v; want %s", viaMarshal, err, want)
	}
}

// benchRecord is a record of the load benchmark as the Redis store holds it.
func benchRecord() *Record {
	at := func(s string) time.Time {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			panic(err)
		}
		return t
	}
	return &Record{
		ID:               "bench-0",
		Tenant:           "bench",
		State:            CallingModel,
		CreatedAt:        at("2026-12-04T14:58:56.826133816Z"),
		UpdatedAt:        at("2026-12-04T14:58:56.851073524Z"),
		Budget:           Budget{Turns: 1000000000, Dollars: 10000000},
		BindingDimension: "turns",
		Stage:            StageNominal,
		Thread:           "fp:15d16011990cf6f8c079a261f9af66eb",
		Provider:         "anthropic",
		Model:            "claude-sonnet-4-5",
		StartedAt:        at("2026-12-04T14:58:56.851073524Z"),
		Reserved:         Reservation{Calls: 1, Tokens: 287, Micros: 4026},
		Call:             "ac6cb043c625a2f0",
		CallReserved:     Reservation{Calls: 1, Tokens: 287, Micros: 4026},
		CallOwner:        "replica-d766f866327b2d69#f487f655a640c84b",
		CallBeat:         at("2026-12-04T14:58:56.851073524Z"),
		CallInput:        31,
	}
}

const benchRecordJSON = `{"id":"bench-0","parent_id":null,"tenant":"bench","state":"CALLING_MODEL","exit_reason":null,"turns":0,"last_stop_reason":"","created_at":"2026-12-04T14:58:56.826133816Z","updated_at":"2026-12-04T14:58:56.851073524Z","budget":{"turns":1000000000,"tokens":0,"wall_clock_s":0,"dollars":10000000},"spend":{"turns":0,"input_tokens":0,"cached_input_tokens":0,"cache_write_tokens":0,"output_tokens":0,"dollars":0,"wall_clock_s":0,"estimated":false},"budget_used":0,"binding_dimension":"turns","stage":"nominal","pending":{"tool_calls":[],"approval_id":null,"control":null},"children":[],"thread":"fp:15d16011990cf6f8c079a261f9af66eb","provider":"anthropic","model":"claude-sonnet-4-5","started_at":"2026-12-04T14:58:56.851073524Z","reserved":{"calls":1,"tokens":287,"micros":4026},"call":"ac6cb043c625a2f0","call_reserved":{"calls":1,"tokens":287,"micros":4026},"call_owner":"replica-d766f866327b2d69#f487f655a640c84b","call_beat":"2026-12-04T14:58:56.851073524Z","call_input_tokens":31}`

func TestAppendJSONBenchRecord(t *testing.T) {
	got, err := benchRecord().MarshalJSON()
	if err != nil || string(got) != benchRecordJSON {
		t.Fatalf("MarshalJSON = %s, %v\nwant %s", got, err, benchRecordJSON)
	}
	sameJSON(t, benchRecord())
}

// Odd values for the differential tests: what encoding/json escapes or
// formats in a way of its own.
var (
	oddStrings = []string{
		"", "a", "run-42/3f9a", `"quoted" \back\slash/`, "<script>&amp;</script>",
		"\b\f\n\r\t", "\x00\x01\x1f\x7f", "line\u2028para\u2029", "é 日本語 🙂",
		"\xff", "bad\xc3", "\xe2\x80", "\xed\xa0\x80", "mixed<\xfe>\u2028\"", "\U0010FFFF",
	}
	oddFloats = []float64{
		0, math.Copysign(0, -1), 1, -1, 0.035, 0.1, 1.5, 20, 1e6, 10000000,
		1e20, 1e21, 1.2345e21, 9.999999999999999e20, 1e-6, 9.99e-7, 1e-7, 1.5e-10, -3e-9,
		123456789.123456789, math.MaxFloat64, math.SmallestNonzeroFloat64, -math.MaxFloat64, 1e100, 1e-100,
	}
	zones = []*time.Location{
		time.UTC, time.FixedZone("IST", 5*3600+1800), time.FixedZone("PST", -8*3600),
		time.FixedZone("LMT", 3600+30), time.FixedZone("", 0), time.FixedZone("far", 23*3600+59*60),
	}
)

// Times encoding/json refuses: years outside [0,9999], a zone 24 hours away.
var badTimes = []time.Time{
	time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
	time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
	time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 24*3600)),
	time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", -100*3600)),
}

// fullRecord sets every field of the record to something not zero.
func fullRecord() *Record {
	r := contractRecord()
	r.ParentID = "run"
	r.ExitReason = "BUDGET_EXCEEDED"
	r.Budget.OnExhaust = OnExhaustPause
	r.Spend = Spend{Turns: 3, InputTokens: 100, CachedInputTokens: 20, CacheWriteTokens: 5, OutputTokens: 7, Dollars: 0.25, WallClockS: 12.5, Estimated: true}
	r.Pending.ApprovalID = "appr-1"
	r.Pending.Control = &Control{Kind: ControlInterrupt, Message: "stop <now>", By: "ops", At: t0}
	r.Pending.ToolCalls = append(r.Pending.ToolCalls, PendingCall{ID: "toolu_02", Name: "Read"})
	r.Thread, r.Provider, r.Model = "agent-1", "openai", "gpt-5"
	r.StartedAt = t0.Add(time.Second)
	r.Reserved = Reservation{Calls: 2, Tokens: 300, Micros: 5000}
	r.Call, r.SettledCall, r.CallOwner = "c2", "c1", "replica-1#x"
	r.CallReserved = Reservation{Tokens: 1}
	r.CallBeat = t0.Add(2 * time.Second)
	r.CallInput, r.CallOutput = 31, 9
	r.LostCalls = []string{"c0", "c-1"}
	r.SweptCalls = []SweptCall{{Call: "c-2", InputTokens: 31, OutputTokens: 9, Dollars: 0.000228}, {Call: "c-3"}}
	r.FallbackPriced = true
	r.HeldSince = t0.Add(3 * time.Second)
	r.WaitedS = 1e-9
	r.PauseReason = PauseBudget
	r.Truncations, r.TruncationsInRow = 4, 2
	r.Outcome, r.TaskClass = OutcomeAccepted, "refactor"
	r.CreatedBy = Creator{Kind: CreatorOperator, Name: "ops-alice"}
	r.Watch = Watch{
		Calls: []Digest{0, 1, 0xdeadbeefcafef00d}, Result: 0xffffffffffffffff, ResultsInRow: 2, ErrorsInRow: 1,
		IdleTurns: 3, Step: LoopStep("restrict"), StepTurn: 6, Notice: true,
		Signal: &LoopSignal{Kind: SignalNoProgress, Tool: "Bash<1>", Digest: 42, Count: 5, Threshold: 4, Window: 8},
	}
	r.Person = &Person{Subject: "00u1&x", Name: "Ada \"L\"", Email: "ada@example.com", Groups: []string{"eng", "on<call>"}}
	return r
}

func TestAppendJSONTable(t *testing.T) {
	cases := []struct {
		name string
		edit func(r *Record)
	}{
		{"new record", func(r *Record) { *r = *New("r", "t", t0) }},
		{"zero record", func(r *Record) { *r = Record{} }},
		{"contract record", func(r *Record) { *r = *contractRecord() }},
		{"every field set", func(*Record) {}},
		{"empty children not nil", func(r *Record) { r.Children = []string{} }},
		{"empty lost calls not nil", func(r *Record) { r.LostCalls = []string{} }},
		{"empty tool calls not nil", func(r *Record) { r.Pending.ToolCalls = []PendingCall{} }},
		{"control without message or by", func(r *Record) { r.Pending.Control = &Control{Kind: ControlKill} }},
		{"zero reservation", func(r *Record) { r.Reserved = Reservation{} }},
		{"negative reservation", func(r *Record) { r.Reserved = Reservation{Calls: -1} }},
		{"negative zero waited", func(r *Record) { r.WaitedS = math.Copysign(0, -1) }},
		{"negative zero budget used", func(r *Record) { r.BudgetUsed = math.Copysign(0, -1) }},
		{"watch with calls only", func(r *Record) { r.Watch = Watch{Calls: []Digest{7}} }},
		{"watch with notice only", func(r *Record) { r.Watch = Watch{Notice: true} }},
		{"watch with signal only", func(r *Record) { r.Watch = Watch{Signal: &LoopSignal{}} }},
		{"watch with empty calls", func(r *Record) { r.Watch = Watch{Calls: []Digest{}, StepTurn: 1} }},
		{"watch zero", func(r *Record) { r.Watch = Watch{} }},
		{"person with subject only", func(r *Record) { r.Person = &Person{Subject: "s"} }},
		{"person with empty groups", func(r *Record) { r.Person = &Person{Subject: "s", Groups: []string{}} }},
		{"person with an empty subject", func(r *Record) { r.Person = &Person{Name: "n", Groups: []string{""}} }},
		{"monotonic clock reading", func(r *Record) { r.UpdatedAt = time.Now(); r.CallBeat = time.Now() }},
		{"local zone", func(r *Record) { r.CreatedAt = r.CreatedAt.Local() }},
		{"zero time in a zone", func(r *Record) { r.StartedAt = time.Time{}.In(zones[1]) }},
		{"year zero", func(r *Record) { r.CreatedAt = time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC) }},
		{"year 9999", func(r *Record) { r.CreatedAt = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC) }},
		{"NaN budget used", func(r *Record) { r.BudgetUsed = math.NaN() }},
		{"infinite dollars", func(r *Record) { r.Spend.Dollars = math.Inf(-1) }},
		{"infinite waited", func(r *Record) { r.WaitedS = math.Inf(1) }},
		{"NaN then bad time", func(r *Record) { r.Budget.Dollars = math.NaN(); r.HeldSince = badTimes[0] }},
		{"bad time then NaN", func(r *Record) { r.UpdatedAt = badTimes[1]; r.WaitedS = math.NaN() }},
		{"bad deadline", func(r *Record) { r.Pending.ToolCalls[0].Deadline = badTimes[2] }},
		{"bad control time", func(r *Record) { r.Pending.Control.At = badTimes[3] }},
	}
	for i, s := range oddStrings {
		cases = append(cases, struct {
			name string
			edit func(r *Record)
		}{"odd string " + string(rune('a'+i)), func(r *Record) { setStrings(r, s) }})
	}
	for _, f := range oddFloats {
		cases = append(cases, struct {
			name string
			edit func(r *Record)
		}{"float " + string(mustJSON(f)), func(r *Record) { setFloats(r, f) }})
	}
	for _, z := range zones {
		cases = append(cases, struct {
			name string
			edit func(r *Record)
		}{"zone " + z.String(), func(r *Record) { setTimes(r, r.CreatedAt.In(z)) }})
	}
	for i, bt := range badTimes {
		cases = append(cases, struct {
			name string
			edit func(r *Record)
		}{"bad time " + string(rune('a'+i)), func(r *Record) { r.CallBeat = bt }})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := fullRecord()
			c.edit(r)
			sameJSON(t, r)
		})
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// setStrings puts s in every string of r.
func setStrings(r *Record, s string) {
	r.ID, r.ParentID, r.Tenant, r.State, r.ExitReason, r.LastStopReason = s, s, s, State(s), s, s
	r.Budget.OnExhaust, r.BindingDimension, r.Stage = s, s, s
	r.Pending.ApprovalID = s
	r.Pending.ToolCalls = []PendingCall{{ID: s, Name: s}}
	r.Pending.Control = &Control{Kind: ControlKind(s), Message: s, By: s}
	r.Children = []string{s, s}
	r.Thread, r.Provider, r.Model, r.Call, r.SettledCall, r.CallOwner = s, s, s, s, s, s
	r.LostCalls = []string{s}
	r.PauseReason, r.Outcome, r.TaskClass = s, s, s
	r.CreatedBy = Creator{Kind: s, Name: s}
	r.Watch.Step = LoopStep(s)
	r.Watch.Signal = &LoopSignal{Kind: s, Tool: s}
}

// setFloats puts f in every float of r.
func setFloats(r *Record, f float64) {
	r.Budget.Dollars, r.Spend.Dollars, r.Spend.WallClockS, r.BudgetUsed, r.WaitedS = f, f, f, f, f
}

// setTimes puts t in every time of r.
func setTimes(r *Record, t time.Time) {
	r.CreatedAt, r.UpdatedAt, r.StartedAt, r.CallBeat, r.HeldSince = t, t, t, t, t
	r.Pending.ToolCalls = []PendingCall{{ID: "a", Deadline: t}}
	r.Pending.Control = &Control{Kind: ControlPause, At: t}
}

// randomRecord sets or leaves unset each field of a record at random, from
// odd values and random ones.
func randomRecord(rng *rand.Rand) *Record {
	pick := func() bool { return rng.IntN(2) == 0 }
	str := func() string {
		if pick() {
			return oddStrings[rng.IntN(len(oddStrings))]
		}
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return string(b)
	}
	optStr := func() string {
		if pick() {
			return ""
		}
		return str()
	}
	strs := func() []string {
		switch rng.IntN(3) {
		case 0:
			return nil
		case 1:
			return []string{}
		}
		s := make([]string, 1+rng.IntN(3))
		for i := range s {
			s[i] = str()
		}
		return s
	}
	num := func() int64 {
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return rng.Int64N(1000)
		case 2:
			return -rng.Int64()
		}
		return rng.Int64()
	}
	float := func() float64 {
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return oddFloats[rng.IntN(len(oddFloats))]
		case 2:
			return rng.Float64() * math.Pow(10, float64(rng.IntN(50)-25))
		}
		for {
			f := math.Float64frombits(rng.Uint64())
			if !math.IsNaN(f) && !math.IsInf(f, 0) {
				return f
			}
		}
	}
	tm := func() time.Time {
		if pick() {
			return time.Time{}
		}
		t := time.Unix(rng.Int64N(253402300799), rng.Int64N(1e9))
		switch rng.IntN(4) {
		case 0:
			return t.UTC()
		case 1:
			return t.Truncate(time.Second).UTC()
		case 2:
			return t.Truncate(time.Millisecond).In(zones[rng.IntN(len(zones))])
		}
		return t.In(zones[rng.IntN(len(zones))])
	}
	res := func() Reservation {
		if pick() {
			return Reservation{}
		}
		return Reservation{Calls: num(), Tokens: num(), Micros: num()}
	}
	digest := func() Digest {
		if pick() {
			return 0
		}
		return Digest(rng.Uint64())
	}

	r := &Record{
		ID: str(), ParentID: optStr(), Tenant: str(), State: State(optStr()), ExitReason: optStr(),
		Turns: num(), LastStopReason: optStr(), CreatedAt: tm(), UpdatedAt: tm(),
		Budget:     Budget{Turns: num(), Tokens: num(), WallClockS: num(), Dollars: float(), OnExhaust: optStr()},
		Spend:      Spend{Turns: num(), InputTokens: num(), CachedInputTokens: num(), CacheWriteTokens: num(), OutputTokens: num(), Dollars: float(), WallClockS: float(), Estimated: pick()},
		BudgetUsed: float(), BindingDimension: optStr(), Stage: optStr(),
		Children: strs(), Thread: optStr(), Provider: optStr(), Model: optStr(), StartedAt: tm(),
		Reserved: res(), Call: optStr(), CallReserved: res(), SettledCall: optStr(), CallOwner: optStr(),
		CallBeat: tm(), CallInput: num(), CallOutput: num(), LostCalls: strs(), FallbackPriced: pick(),
		HeldSince: tm(), WaitedS: float(), PauseReason: optStr(), Truncations: num(), TruncationsInRow: num(),
		Outcome: optStr(), TaskClass: optStr(), CreatedBy: Creator{Kind: optStr(), Name: optStr()},
	}
	if rng.IntN(2) == 0 {
		r.SweptCalls = []SweptCall{{Call: str(), InputTokens: num(), OutputTokens: num(), Dollars: float()}}
	}
	r.Pending.ApprovalID = optStr()
	if n := rng.IntN(4); n > 0 {
		r.Pending.ToolCalls = make([]PendingCall, n-1)
		for i := range r.Pending.ToolCalls {
			r.Pending.ToolCalls[i] = PendingCall{ID: str(), Name: optStr(), Deadline: tm()}
		}
	}
	if pick() {
		r.Pending.Control = &Control{Kind: ControlKind(optStr()), Message: optStr(), By: optStr(), At: tm()}
	}
	if pick() {
		r.Person = &Person{Subject: str(), Name: optStr(), Email: optStr()}
		for range rng.IntN(3) {
			r.Person.Groups = append(r.Person.Groups, str())
		}
	}
	if pick() {
		r.Watch = Watch{Result: digest(), ResultsInRow: num(), ErrorsInRow: num(), IdleTurns: num(), Step: LoopStep(optStr()), StepTurn: num(), Notice: pick()}
		if n := rng.IntN(4); n > 0 {
			r.Watch.Calls = make([]Digest, n-1)
			for i := range r.Watch.Calls {
				r.Watch.Calls[i] = digest()
			}
		}
		if pick() {
			r.Watch.Signal = &LoopSignal{Kind: optStr(), Tool: optStr(), Digest: digest(), Count: num(), Threshold: num(), Window: num()}
		}
	}
	return r
}

func TestAppendJSONRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for range n {
		r := randomRecord(rng)
		// Now and then a value encoding/json refuses.
		switch rng.IntN(40) {
		case 0:
			r.UpdatedAt = badTimes[rng.IntN(len(badTimes))]
		case 1:
			r.Spend.WallClockS = math.NaN()
		}
		sameJSON(t, r)
	}
}

// FuzzRecordAppendJSON builds a record from the fuzzer's values, each field set
// or left zero by a bit of set, and compares its JSON with encoding/json's.
func FuzzRecordAppendJSON(f *testing.F) {
	f.Add("run-42", "run", "<tag>&\u2028", uint64(0), int64(0), 0.0, 0.0, int64(0), int64(0), int64(0))
	f.Add("bench-0", "", "claude-sonnet-4-5", uint64(math.MaxUint64), int64(287), 0.035, 1e21, int64(1796396336), int64(826133816), int64(0))
	f.Add("\xff\x00\"\\", "\xe2\x80", "é", uint64(0x5555555555555555), int64(-1), 1e-7, -0.0, int64(-62135596800), int64(1), int64(19800))
	f.Add("a", "b", "c", uint64(0xaaaaaaaaaaaaaaaa), int64(math.MaxInt64), math.MaxFloat64, 5e-324, int64(253402300799), int64(999999999), int64(-86399))
	f.Add("y", "", "", uint64(1), int64(0), math.NaN(), 0.0, int64(253402300800), int64(0), int64(86400))
	f.Fuzz(func(t *testing.T, s1, s2, s3 string, set uint64, n int64, f1, f2 float64, sec, nsec, offset int64) {
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
		at := time.Unix(sec, nsec%1e9).In(time.FixedZone("", int(offset%(200*3600))))
		tm := func() time.Time {
			if on() {
				return at
			}
			return time.Time{}
		}
		r := &Record{
			ID: s1, ParentID: str(s2), Tenant: s3, State: State(str(s1)), ExitReason: str(s3),
			Turns: num(), LastStopReason: str(s2), CreatedAt: tm(), UpdatedAt: tm(),
			Budget:     Budget{Turns: num(), Tokens: num(), WallClockS: num(), Dollars: f1, OnExhaust: str(s2)},
			Spend:      Spend{Turns: num(), InputTokens: num(), OutputTokens: num(), Dollars: f2, WallClockS: f1, Estimated: on()},
			BudgetUsed: f2, BindingDimension: str(s3), Stage: str(s1),
			Thread: str(s2), Provider: str(s3), Model: str(s1), StartedAt: tm(),
			Reserved: Reservation{Calls: num(), Tokens: num()}, Call: str(s1), CallReserved: Reservation{Micros: num()},
			SettledCall: str(s2), CallOwner: str(s3), CallBeat: tm(), CallInput: num(), CallOutput: num(),
			FallbackPriced: on(), HeldSince: tm(), PauseReason: str(s1), Truncations: num(), TruncationsInRow: num(),
			Outcome: str(s2), TaskClass: str(s3), CreatedBy: Creator{Kind: str(s1), Name: str(s3)},
		}
		if on() {
			r.WaitedS = f1
		}
		if on() {
			r.Children = []string{s1, s2}
		}
		if on() {
			r.LostCalls = []string{s3}
		}
		if on() {
			r.SweptCalls = []SweptCall{{Call: s1, InputTokens: num(), OutputTokens: num(), Dollars: f2}}
		}
		if on() {
			r.Pending = Pending{ToolCalls: []PendingCall{{ID: s1, Name: s2, Deadline: tm()}}, ApprovalID: str(s3)}
		}
		if on() {
			r.Pending.Control = &Control{Kind: ControlKind(s1), Message: str(s2), By: str(s3), At: tm()}
		}
		if on() {
			r.Person = &Person{Subject: s1, Name: str(s2), Email: str(s3), Groups: []string{s2, s3}}
		}
		if on() {
			r.Watch = Watch{Calls: []Digest{Digest(set), Digest(n)}, Result: Digest(num()), IdleTurns: num(), Step: LoopStep(str(s2)), Notice: on()}
			if on() {
				r.Watch.Signal = &LoopSignal{Kind: s3, Tool: str(s1), Digest: Digest(num()), Count: n, Window: num()}
			}
		}
		sameJSON(t, r)
	})
}

func BenchmarkRecordMarshalJSON(b *testing.B) {
	r := benchRecord()
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.MarshalJSON(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reflect", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := marshalReflect(r); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestAppendJSONCoversEveryField: fullRecord sets every field of Record,
// and its JSON has every key of the wire struct, so a field added to
// Record or to recordJSON but not to AppendJSON (or to this test's records)
// fails here rather than going unwritten.
func TestAppendJSONCoversEveryField(t *testing.T) {
	r := fullRecord()
	v := reflect.ValueOf(r).Elem()
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("fullRecord leaves %s zero", v.Type().Field(i).Name)
		}
	}
	b, err := r.AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	wire := reflect.TypeFor[recordJSON]()
	if len(m) != wire.NumField() {
		t.Errorf("JSON has %d keys, the wire struct %d fields", len(m), wire.NumField())
	}
	for i := range wire.NumField() {
		name, _, _ := strings.Cut(wire.Field(i).Tag.Get("json"), ",")
		if _, ok := m[name]; !ok {
			t.Errorf("JSON of a full record has no %q", name)
		}
	}
}
