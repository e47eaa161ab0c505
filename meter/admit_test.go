package meter

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"gatekeeper/trajectory"
)

func TestWorstReservation(t *testing.T) {
	tb := DefaultTable()
	// 4000 bytes: 1000 tokens at the 1-hour write rate ($6), 1000 out at $15.
	w := tb.Worst("claude-sonnet-4-5", 4000)
	if got, want := w.Reservation(1000), (Reservation{Tokens: 2000, Micros: 21_000, Turns: 1}); got != want {
		t.Errorf("sonnet reservation %+v, want %+v", got, want)
	}
	// OpenAI bills no writes: input at $2.50, 500 out at $10.
	w = tb.Worst("gpt-4o", 4000)
	if got, want := w.Reservation(500), (Reservation{Tokens: 1500, Micros: 7_500, Turns: 1}); got != want {
		t.Errorf("gpt-4o reservation %+v, want %+v", got, want)
	}
}

func TestFitCall(t *testing.T) {
	tb := DefaultTable()
	w := tb.Worst("gpt-4o", 400) // 100 tokens: 250,000,000 picos; output 10,000,000 picos a token
	tests := []struct {
		name     string
		chain    []Level
		settled  bool
		want     int64
		dim      Dimension
		bindigID string
	}{
		{"no ceilings", []Level{{ID: "run", Budget: trajectory.Budget{Turns: 5}}}, false, 1<<63 - 1, "", ""},
		// ($0.02 − $0.00025) / $10 per million = 1975 tokens
		{"dollars", []Level{{ID: "run", Budget: trajectory.Budget{Dollars: 0.02}}}, false, 1975, Dollars, "run"},
		{"tokens", []Level{{ID: "run", Budget: trajectory.Budget{Tokens: 1000}, Used: Used{Tokens: 400}}}, false, 500, Tokens, "run"},
		{"others in flight count", []Level{{ID: "run", Budget: trajectory.Budget{Dollars: 0.02}, Reserved: Reservation{Micros: 10_000}}}, false, 975, Dollars, "run"},
		{"settled leaves them out", []Level{{ID: "run", Budget: trajectory.Budget{Dollars: 0.02}, Reserved: Reservation{Micros: 10_000}}}, true, 1975, Dollars, "run"},
		{"the input alone does not fit", []Level{{ID: "run", Budget: trajectory.Budget{Dollars: 0.02}, Used: Used{Micros: 19_900}}}, false, -1, Dollars, "run"},
		{"spent past the ceiling", []Level{{ID: "run", Budget: trajectory.Budget{Dollars: 0.02}, Used: Used{Micros: 50_000}}}, false, -1, Dollars, "run"},
		{"the tighter level binds", []Level{
			{ID: "run/t", Budget: trajectory.Budget{Tokens: 100_000}},
			{ID: "run", Budget: trajectory.Budget{Dollars: 0.02}, Used: Used{Micros: 10_000}},
		}, false, 975, Dollars, "run"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := FitCall(tc.chain, w, tc.settled)
			if f.MaxOutput != tc.want || f.Binding != tc.dim || f.BindingID != tc.bindigID {
				t.Errorf("FitCall = %+v, want %d %q %q", f, tc.want, tc.dim, tc.bindigID)
			}
			if f.MaxOutput >= 0 && f.Binding == Dollars {
				// The fitted limit fits, one more token does not.
				var l Level
				for _, x := range tc.chain {
					if x.ID == f.BindingID {
						l = x
					}
				}
				u := l.Used
				if !tc.settled {
					u = u.Add(l.Reserved)
				}
				left := FromDollars(l.Budget.Dollars) - u.Micros
				if r := w.Reservation(f.MaxOutput); r.Micros > left {
					t.Errorf("reservation at the fit %d µ$ is above what is left, %d µ$", r.Micros, left)
				}
				if r := w.Reservation(f.MaxOutput + 1); r.Micros <= left {
					t.Errorf("one more token (%d µ$) still fits %d µ$: the fit is not the largest", r.Micros, left)
				}
			}
		})
	}
}

func TestAdmit(t *testing.T) {
	tb := DefaultTable()
	th := DefaultThresholds()
	chat := tb.Worst("gpt-4o", 400)
	tests := []struct {
		name    string
		chain   []Level
		call    Call
		stage   Stage
		wait    bool
		maxOut  int64
		clamped bool
	}{
		{
			// The case: $0.02, no limit sent; the default 16,384
			// tokens would cost $0.16, so the limit is set to what fits.
			"a $0.02 run's first call without a limit is clamped", []Level{{ID: "run", Budget: trajectory.Budget{Dollars: 0.02}}},
			Call{Worst: chat, DefaultOutput: 16384, MinOutput: 1024}, Nominal, false, 1975, true,
		},
		{
			"a limit that fits goes as sent", []Level{{ID: "run", Budget: trajectory.Budget{Dollars: 1}}},
			Call{Worst: chat, MaxOutput: 4000, DefaultOutput: 16384, MinOutput: 1024}, Nominal, false, 4000, false,
		},
		{
			"no limit and room for the default leaves it unset", []Level{{ID: "run", Budget: trajectory.Budget{Dollars: 1}}},
			Call{Worst: chat, DefaultOutput: 16384, MinOutput: 1024}, Nominal, false, 0, false,
		},
		{
			"less than the minimum left halts", []Level{{ID: "run", Budget: trajectory.Budget{Dollars: 0.02}, Used: Used{Micros: 10_000}}},
			Call{Worst: chat, MaxOutput: 4000, DefaultOutput: 16384, MinOutput: 1024}, Halt, false, 0, false,
		},
		{
			"a small limit below the minimum still goes when it fits", []Level{{ID: "run", Budget: trajectory.Budget{Dollars: 0.02}, Used: Used{Micros: 10_000}}},
			Call{Worst: chat, MaxOutput: 500, DefaultOutput: 16384, MinOutput: 1024}, Nominal, false, 500, false,
		},
		{
			"others in flight hold the rest: wait", []Level{{ID: "run", Budget: trajectory.Budget{Dollars: 0.02}, Reserved: Reservation{Micros: 15_000, Turns: 1}}},
			Call{Worst: chat, MaxOutput: 4000, DefaultOutput: 16384, MinOutput: 1024}, Restrict, true, 0, false,
		},
		{
			"turns used up halt", []Level{{ID: "run", Budget: trajectory.Budget{Turns: 3, Dollars: 1}, Used: Used{Turns: 3}}},
			Call{Worst: chat, MaxOutput: 100, DefaultOutput: 16384, MinOutput: 1024}, Halt, false, 0, false,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := Admit(tc.chain, tc.call, th)
			if a.Wait != tc.wait || (!a.Wait && a.Stage != tc.stage) || a.MaxOutput != tc.maxOut || a.Clamped != tc.clamped {
				t.Errorf("Admit = %+v, want stage %s wait %v max %d clamped %v", a, tc.stage, tc.wait, tc.maxOut, tc.clamped)
			}
		})
	}
}

// TestAdmitClaudeCodeFirstTurn: Claude Code sends max_tokens 32,000 and a
// body of about 76 KB; with a $1 budget its first turn is nominal and goes
// as sent, since nothing has been spent.
func TestAdmitClaudeCodeFirstTurn(t *testing.T) {
	tb := DefaultTable()
	for _, model := range []string{"claude-sonnet-4-5", "claude-opus-4-5"} {
		a := Admit([]Level{{ID: "run", Budget: trajectory.Budget{Dollars: 1}}},
			Call{Worst: tb.Worst(model, 76_000), MaxOutput: 32_000, DefaultOutput: 16384, MinOutput: 1024}, DefaultThresholds())
		if a.Stage != Nominal || a.Rho != 0 || a.MaxOutput != 32_000 || a.Clamped {
			t.Errorf("%s: first turn %+v, want nominal with its 32,000 limit", model, a)
		}
	}
}

// TestAdmitPropertyNeverOvershoots runs random sequences of parallel calls
// on a run with threads: calls start on random threads with random sizes
// and limits, and settle in random order with random usage within their
// input estimate and output limit. Measured spend must never pass a
// ceiling, and a call may be refused for good only when what its chain has
// measurably left cannot pay for its input and a minimal output.
func TestAdmitPropertyNeverOvershoots(t *testing.T) {
	tb := DefaultTable()
	th := DefaultThresholds()
	models := []string{"claude-sonnet-4-5", "claude-opus-4-1", "gpt-4o", "gpt-5-nano", "claude-haiku-5-5"}
	const minOut = 1024
	type call struct {
		model  string
		levels []int // indices of the levels it reserved on
		r      Reservation
		inMax  int64
		outMax int64
	}
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 42))
		// Level 0 is the run; 1..3 its threads, some with budgets of their own.
		lv := []Level{{ID: "run", Budget: trajectory.Budget{Dollars: 0.01 + rng.Float64()*3}}}
		if rng.IntN(2) == 0 {
			lv[0].Budget.Tokens = 20_000 + rng.Int64N(500_000)
		}
		for i := 1; i <= 3; i++ {
			l := Level{ID: fmt.Sprintf("run/t%d", i)}
			if rng.IntN(3) == 0 {
				l.Budget.Dollars = 0.005 + rng.Float64()
			}
			lv = append(lv, l)
		}
		chainOf := func(th int) []int { return []int{th, 0} }
		levelsOf := func(ix []int) []Level {
			out := make([]Level, len(ix))
			for i, x := range ix {
				out[i] = lv[x]
			}
			return out
		}
		var inFlight []call
		served, refused := 0, 0
		defer func() { t.Logf("seed %d: %d served, %d refused", seed, served, refused) }()
		for step := range 400 {
			if len(inFlight) > 0 && (rng.IntN(2) == 0 || step > 300) {
				// Settle a random call in flight.
				k := rng.IntN(len(inFlight))
				c := inFlight[k]
				inFlight = append(inFlight[:k], inFlight[k+1:]...)
				in := rng.Int64N(c.inMax + 1)
				cached := rng.Int64N(in + 1)
				write := rng.Int64N(in - cached + 1)
				u := trajectory.Usage{InputTokens: in - cached - write, CachedInputTokens: cached, CacheWriteTokens: write,
					CacheWrite1hTokens: rng.Int64N(write + 1), OutputTokens: rng.Int64N(c.outMax + 1)}
				charge := tb.Cost(c.model, u)
				if charge.Micros > c.r.Micros {
					t.Fatalf("seed %d: charge %d µ$ above the reservation %d µ$ for %+v", seed, charge.Micros, c.r.Micros, u)
				}
				for _, x := range c.levels {
					lv[x].Reserved = Reservation{Turns: lv[x].Reserved.Turns - 1, Tokens: lv[x].Reserved.Tokens - c.r.Tokens, Micros: lv[x].Reserved.Micros - c.r.Micros}
					lv[x].Used.Turns++
					lv[x].Used.Tokens += u.InputTokens + u.CachedInputTokens + u.CacheWriteTokens + u.OutputTokens
					lv[x].Used.Micros += charge.Micros
					if c := FromDollars(lv[x].Budget.Dollars); c > 0 && lv[x].Used.Micros > c {
						t.Fatalf("seed %d step %d: %s spent %d µ$ of a %d µ$ ceiling", seed, step, lv[x].ID, lv[x].Used.Micros, c)
					}
					if c := lv[x].Budget.Tokens; c > 0 && lv[x].Used.Tokens > c {
						t.Fatalf("seed %d step %d: %s used %d tokens of %d", seed, step, lv[x].ID, lv[x].Used.Tokens, c)
					}
				}
				continue
			}
			// Start a call on a random thread.
			thread := 1 + rng.IntN(3)
			ix := chainOf(thread)
			model := models[rng.IntN(len(models))]
			w := tb.Worst(model, 200+rng.Int64N(40_000))
			asked := []int64{0, 512, 4096, 32_000, 64_000}[rng.IntN(5)]
			c := Call{Worst: w, MaxOutput: asked, DefaultOutput: 16384, MinOutput: minOut}
			a := Admit(levelsOf(ix), c, th)
			switch {
			case a.Wait:
				if len(inFlight) == 0 {
					t.Fatalf("seed %d: told to wait with nothing in flight", seed)
				}
			case a.Stage == Halt:
				refused++
				// Only when some level's measured remainder cannot pay
				// for the input and the minimal output.
				limit := asked
				if limit <= 0 {
					limit = 16384
				}
				need := w.Reservation(min(minOut, limit))
				short := false
				for _, x := range ix {
					l := lv[x]
					if c := FromDollars(l.Budget.Dollars); c > 0 && c-l.Used.Micros < need.Micros {
						short = true
					}
					if c := l.Budget.Tokens; c > 0 && c-l.Used.Tokens < need.Tokens {
						short = true
					}
				}
				if !short {
					t.Fatalf("seed %d step %d: refused a call the measured remainder could pay for: %+v", seed, step, a)
				}
			default:
				served++
				out := a.MaxOutput
				if out == 0 {
					out = 16384
				}
				if a.Reservation != w.Reservation(out) {
					t.Fatalf("seed %d: reservation %+v for an output limit of %d", seed, a.Reservation, out)
				}
				for _, x := range ix {
					lv[x].Reserved = plus(lv[x].Reserved, a.Reservation)
				}
				inFlight = append(inFlight, call{model: model, levels: ix, r: a.Reservation, inMax: w.InputTokens, outMax: out})
			}
		}
		if served == 0 {
			t.Errorf("seed %d: no call was served", seed)
		}
	}
}

func plus(r, o Reservation) Reservation {
	return Reservation{Turns: r.Turns + o.Turns, Tokens: r.Tokens + o.Tokens, Micros: r.Micros + o.Micros}
}
