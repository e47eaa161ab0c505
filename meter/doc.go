// Package meter owns what a model call costs and how close a run is to its
// ceilings.
//
// It holds three things:
//
//   - Table, the price list: USD per million tokens for uncached input,
//     cached input (cache reads), 5-minute and 1-hour cache writes and
//     output, by model name, dated snapshot or prefix, with service-tier
//     multipliers, from the embedded prices.yaml (every row with its source
//     and date) overridden by config. Cost turns one turn's usage into
//     integer micro-dollars; an unknown model is charged at the table's
//     fallback price and flagged, never at zero.
//   - the budget vector: Rho, the largest used/ceiling over the turns,
//     tokens, wall-clock and dollars ceilings; Check, which applies it to a
//     thread and every ancestor from measured spend and the reservations of
//     the other calls in flight; and Admit, which fits a call's worst case
//     (Worst) to what its chain has left (FitCall), clamping its output
//     limit, so that parallel calls never overshoot a ceiling.
//   - the escalation stages (nominal, steer, restrict, halt) that Thresholds
//     maps ρ onto.
//
// Money is int64 micro-dollars (1e-6 USD) inside the package, so sums do not
// drift; dollars as float64 appear only where the record carries them.
//
// The package is pure: no I/O besides reading its embedded price file, no
// clock, no state between calls, and no imports from the rest of gatekeeper
// except the trajectory types it meters. internal/purity enforces that.
package meter
