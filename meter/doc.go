// Package meter owns what a model call costs and how close a run is to its
// ceilings.
//
// It holds three things:
//
//   - Table, the price list: USD per million tokens for uncached input,
//     cached input (cache reads), cache writes and output, by model name,
//     dated snapshot or prefix, from the embedded prices.yaml overridden by
//     config. Cost turns one turn's usage into integer micro-dollars; an
//     unknown model is charged at the table's fallback price and flagged,
//     never at zero.
//   - the budget vector: Rho, the largest used/ceiling over the turns,
//     tokens, wall-clock and dollars ceilings, and Check, which applies it to
//     a thread and every ancestor with a reservation for the call about to
//     start, so that parallel threads cannot overshoot together.
//   - the escalation stages (nominal, steer, restrict, halt) that Thresholds
//     maps ρ onto.
//
// Money is int64 micro-dollars (1e-6 USD) inside the package, so sums do not
// drift; dollars as float64 appear only where the record carries them.
//
// The package is pure: no I/O besides reading its embedded price file, no
// clock, no state between calls, and no imports from the rest of gatekeeper
// except the trajectory types it meters. imports_test.go enforces that.
package meter
