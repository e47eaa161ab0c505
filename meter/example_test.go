package meter_test

import (
	"fmt"

	"gatekeeper/meter"
	"gatekeeper/trajectory"
)

func trajectoryUsage(n int64) trajectory.Usage {
	return trajectory.Usage{InputTokens: n, OutputTokens: n}
}

func ExampleTable_Cost() {
	table := meter.DefaultTable()
	// An Anthropic turn: 11 uncached input tokens, 1031 read from the cache,
	// 100 output tokens.
	c := table.Cost("claude-sonnet-4-5-20250929", trajectory.Usage{InputTokens: 11, CachedInputTokens: 1031, OutputTokens: 100})
	fmt.Println(c.Micros, c.Priced, c.Model)

	// A model the table does not know is charged the fallback and flagged.
	c = table.Cost("some-new-model", trajectory.Usage{InputTokens: 1000, OutputTokens: 100})
	fmt.Println(c.Micros, c.Priced)
	// Output:
	// 1842 true claude-sonnet-4-5
	// 22500 false
}

func ExampleCheck() {
	table := meter.DefaultTable()
	// A thread with its own budget under a run with a tighter dollar
	// budget, where another thread has a call in flight.
	other := table.Estimate("gpt-4.1", 40_000, 8_000)
	chain := []meter.Level{
		{ID: "run-42/t1", Budget: trajectory.Budget{Turns: 50}, Used: meter.Used{Turns: 12}},
		{ID: "run-42", Budget: trajectory.Budget{Turns: 200, Dollars: 1}, Used: meter.Used{Turns: 40, Micros: 700_000}, Reserved: other},
	}
	d := meter.Check(chain, meter.DefaultThresholds())
	fmt.Printf("%.3f %s %s %s\n", d.Rho, d.Binding, d.BindingID, d.Stage)
	// Output:
	// 0.784 dollars run-42 steer
}
