package meter

import (
	"math"
	"testing"
	"time"

	"gatekeeper/trajectory"
)

func TestRho(t *testing.T) {
	full := trajectory.Budget{Turns: 200, Tokens: 5_000_000, WallClockS: 7200, Dollars: 20}
	tests := []struct {
		name    string
		b       trajectory.Budget
		u       Used
		want    float64
		binding Dimension
	}{
		{"turns bind", full, Used{Turns: 7, Tokens: 100_000, WallClock: time.Minute, Micros: 100_000}, 0.035, Turns},
		{"tokens bind", full, Used{Turns: 7, Tokens: 2_500_000, WallClock: time.Minute, Micros: 100_000}, 0.5, Tokens},
		{"wall clock binds", full, Used{Turns: 7, Tokens: 100_000, WallClock: 108 * time.Minute, Micros: 100_000}, 0.9, WallClock},
		{"dollars bind", full, Used{Turns: 7, Tokens: 100_000, WallClock: time.Minute, Micros: 19_000_000}, 0.95, Dollars},
		{"over the ceiling", full, Used{Micros: 30_000_000}, 1.5, Dollars},
		{"zero ceilings ignored", trajectory.Budget{Tokens: 1000}, Used{Turns: 500, Tokens: 100, WallClock: time.Hour, Micros: 1e9}, 0.1, Tokens},
		{"no ceiling at all", trajectory.Budget{}, Used{Turns: 500, Micros: 1e9}, 0, ""},
		{"negative ceilings ignored", trajectory.Budget{Turns: -1, Dollars: -5, WallClockS: 60}, Used{Turns: 5, Micros: 5, WallClock: 30 * time.Second}, 0.5, WallClock},
		{"NaN dollar ceiling ignored", trajectory.Budget{Dollars: math.NaN(), Turns: 10}, Used{Turns: 1, Micros: 1}, 0.1, Turns},
		{"nothing used names the first ceiling", full, Used{}, 0, Turns},
		{"tie goes to the earlier dimension", trajectory.Budget{Tokens: 100, Dollars: 1}, Used{Tokens: 50, Micros: 500_000}, 0.5, Tokens},
		{"negative use counts as none", trajectory.Budget{Turns: 10, Tokens: 10}, Used{Turns: -5, Tokens: 1}, 0.1, Tokens},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, binding := Rho(tc.b, tc.u)
			if !near(got, tc.want) || binding != tc.binding {
				t.Errorf("Rho(%+v, %+v) = %v, %q; want %v, %q", tc.b, tc.u, got, binding, tc.want, tc.binding)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	th := DefaultThresholds()
	tests := []struct {
		name  string
		chain []Level
		r     Reservation
		want  Decision
	}{
		{
			"no chain", nil, Reservation{Tokens: 1e9},
			Decision{Stage: Nominal},
		},
		{
			"no ceilings anywhere", []Level{{ID: "a", Used: Used{Turns: 1e6}}}, Reservation{Tokens: 1e9, Micros: 1e12, Turns: 1},
			Decision{Stage: Nominal},
		},
		{
			"nominal with room", []Level{{ID: "a", Budget: trajectory.Budget{Tokens: 10_000}, Used: Used{Tokens: 1000}}},
			Reservation{Tokens: 1000, Turns: 1},
			Decision{Rho: 0.2, Binding: Tokens, BindingID: "a", Stage: Nominal},
		},
		{
			"reservation reaches steer", []Level{{ID: "a", Budget: trajectory.Budget{Tokens: 10_000}, Used: Used{Tokens: 6000}}},
			Reservation{Tokens: 1000, Turns: 1},
			Decision{Rho: 0.7, Binding: Tokens, BindingID: "a", Stage: Steer},
		},
		{
			"reservation pushes tokens over 1 and halts", []Level{{ID: "a", Budget: trajectory.Budget{Tokens: 10_000}, Used: Used{Tokens: 8000}}},
			Reservation{Tokens: 4000, Turns: 1},
			Decision{Rho: 1.2, Binding: Tokens, BindingID: "a", Stage: Halt},
		},
		{
			"reservation pushes dollars over 1 and halts", []Level{{ID: "a", Budget: trajectory.Budget{Dollars: 20, Tokens: 1e9}, Used: Used{Micros: 19_500_000}}},
			Reservation{Micros: 1_000_000, Tokens: 10, Turns: 1},
			Decision{Rho: 1.025, Binding: Dollars, BindingID: "a", Stage: Halt},
		},
		{
			"without the reservation it would pass", []Level{{ID: "a", Budget: trajectory.Budget{Dollars: 20}, Used: Used{Micros: 19_500_000}}},
			Reservation{Turns: 1},
			Decision{Rho: 0.975, Binding: Dollars, BindingID: "a", Stage: Restrict},
		},
		{
			"parent binds", []Level{
				{ID: "run/t1", Budget: trajectory.Budget{Turns: 100}, Used: Used{Turns: 10, Tokens: 50_000}},
				{ID: "run", Budget: trajectory.Budget{Turns: 200, Tokens: 100_000}, Used: Used{Turns: 150, Tokens: 85_000}},
			},
			Reservation{Tokens: 5000, Turns: 1},
			Decision{Rho: 0.9, Binding: Tokens, BindingID: "run", Stage: Restrict},
		},
		{
			"thread binds over a looser parent", []Level{
				{ID: "run/t1", Budget: trajectory.Budget{Turns: 10}, Used: Used{Turns: 9}},
				{ID: "run", Budget: trajectory.Budget{Turns: 200}, Used: Used{Turns: 150}},
			},
			Reservation{Turns: 1},
			Decision{Rho: 0.9, Binding: Turns, BindingID: "run/t1", Stage: Restrict},
		},
		{
			"tie goes to the nearer record", []Level{
				{ID: "run/t1", Budget: trajectory.Budget{Turns: 10}, Used: Used{Turns: 5}},
				{ID: "run", Budget: trajectory.Budget{Turns: 100}, Used: Used{Turns: 50}},
			},
			Reservation{Turns: 1},
			Decision{Rho: 0.5, Binding: Turns, BindingID: "run/t1", Stage: Nominal},
		},
		{
			"a level without ceilings does not bind", []Level{
				{ID: "run/t1", Used: Used{Turns: 5}},
				{ID: "run", Budget: trajectory.Budget{Turns: 100}, Used: Used{Turns: 10}},
			},
			Reservation{Turns: 1},
			Decision{Rho: 0.1, Binding: Turns, BindingID: "run", Stage: Nominal},
		},
		{
			"a call in flight elsewhere counts", []Level{
				{ID: "run", Budget: trajectory.Budget{Turns: 3}, Used: Used{Turns: 2}.Add(Reservation{Turns: 1})},
			},
			Reservation{Turns: 1},
			Decision{Rho: 1, Binding: Turns, BindingID: "run", Stage: Halt},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// r stands for the other calls in flight, reserved on every level.
			chain := make([]Level, len(tc.chain))
			for i, l := range tc.chain {
				l.Reserved = Reservation{Tokens: tc.r.Tokens, Micros: tc.r.Micros}
				chain[i] = l
			}
			got := Check(chain, th)
			if !near(got.Rho, tc.want.Rho) || got.Binding != tc.want.Binding || got.BindingID != tc.want.BindingID || got.Stage != tc.want.Stage {
				t.Errorf("Check = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestCheckTurnCeilingAdmitsExactlyN runs calls one after another against a
// turns ceiling: N start, the N+1th halts.
func TestCheckTurnCeilingAdmitsExactlyN(t *testing.T) {
	for _, n := range []int64{1, 3, 10, 200} {
		used := Used{}
		started := int64(0)
		for i := int64(0); i < n+5; i++ {
			d := Check([]Level{{ID: "run", Budget: trajectory.Budget{Turns: n}, Used: used}}, DefaultThresholds())
			if d.Stage == Halt {
				break
			}
			started++
			used.Turns++
		}
		if started != n {
			t.Errorf("turns ceiling %d admitted %d calls", n, started)
		}
	}
}

// TestCheckCountsOthersNotItself: a call's own estimate does not move its
// stage; the reservations of calls already in flight do.
func TestCheckCountsOthersNotItself(t *testing.T) {
	budget := trajectory.Budget{Dollars: 1}
	alone := Check([]Level{{ID: "run", Budget: budget, Used: Used{Micros: 400_000}}}, DefaultThresholds())
	if alone.Stage != Nominal || !near(alone.Rho, 0.4) {
		t.Errorf("measured $0.40 of $1 = %+v, want nominal at 0.4", alone)
	}
	other := Check([]Level{{ID: "run", Budget: budget, Used: Used{Micros: 400_000}, Reserved: Reservation{Micros: 500_000, Turns: 1}}}, DefaultThresholds())
	if other.Stage != Restrict || !near(other.Rho, 0.9) {
		t.Errorf("with $0.50 in flight = %+v, want restrict at 0.9", other)
	}
}

func TestUsedAdd(t *testing.T) {
	u := Used{Turns: 1, Tokens: 10, WallClock: time.Second, Micros: 100}
	got := u.Add(Reservation{Turns: 2, Tokens: 20, Micros: 200})
	want := Used{Turns: 3, Tokens: 30, WallClock: time.Second, Micros: 300}
	if got != want {
		t.Errorf("Add = %+v, want %+v", got, want)
	}
	if got := u.Add(Reservation{Turns: -5, Tokens: -5, Micros: -5}); got != u {
		t.Errorf("a negative reservation changed use: %+v", got)
	}
	if got := (Used{Micros: math.MaxInt64}).Add(Reservation{Micros: 1}); got.Micros != math.MaxInt64 {
		t.Errorf("Add wrapped to %d", got.Micros)
	}
}

func TestUsedOf(t *testing.T) {
	tests := []struct {
		name string
		s    trajectory.Spend
		want Used
	}{
		{
			"every field",
			trajectory.Spend{Turns: 7, InputTokens: 100, CachedInputTokens: 200, CacheWriteTokens: 300, OutputTokens: 400, Dollars: 1.227645, WallClockS: 90.5},
			Used{Turns: 7, Tokens: 1000, WallClock: 90500 * time.Millisecond, Micros: 1_227_645},
		},
		{"nothing", trajectory.Spend{}, Used{}},
		{"negative wall clock", trajectory.Spend{WallClockS: -3}, Used{}},
		{"NaN wall clock", trajectory.Spend{WallClockS: math.NaN()}, Used{}},
		{"huge wall clock", trajectory.Spend{WallClockS: 1e300}, Used{WallClock: math.MaxInt64}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := UsedOf(tc.s); got != tc.want {
				t.Errorf("UsedOf(%+v) = %+v, want %+v", tc.s, got, tc.want)
			}
		})
	}
}

func TestElapsed(t *testing.T) {
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		started time.Time
		now     time.Time
		waited  time.Duration
		want    time.Duration
	}{
		{"not started", time.Time{}, start, 0, 0},
		{"age since the first turn", start, start.Add(90 * time.Minute), 0, 90 * time.Minute},
		{"waits excluded", start, start.Add(90 * time.Minute), 30 * time.Minute, time.Hour},
		{"waits longer than the age", start, start.Add(time.Minute), time.Hour, 0},
		{"clock behind the start", start, start.Add(-time.Minute), 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Elapsed(tc.started, tc.now, tc.waited); got != tc.want {
				t.Errorf("Elapsed = %v, want %v", got, tc.want)
			}
		})
	}
}
