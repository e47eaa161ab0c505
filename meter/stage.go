package meter

import (
	"fmt"
	"math"
)

// Stage is how hard gatekeeper leans on a run, from its ρ.
type Stage string

// The stages, in escalating order.
const (
	// Nominal: nothing is pressing.
	Nominal Stage = "nominal"
	// Steer: a budget notice is appended to the request.
	Steer Stage = "steer"
	// Restrict: only read-only tools remain.
	Restrict Stage = "restrict"
	// Halt: the call is refused and the run fails with BUDGET_EXCEEDED.
	Halt Stage = "halt"
)

// Thresholds are the values of ρ at which each stage starts. A stage starts
// AT its threshold: with the defaults, ρ = 0.70 is already steer and ρ = 1.00
// is halt. The zero value means the defaults, so a forgotten setting never
// halts every call.
type Thresholds struct {
	Steer    float64 `yaml:"steer" json:"steer"`
	Restrict float64 `yaml:"restrict" json:"restrict"`
	Halt     float64 `yaml:"halt" json:"halt"`
}

// DefaultThresholds returns 0.70 / 0.90 / 1.00.
func DefaultThresholds() Thresholds { return Thresholds{Steer: 0.70, Restrict: 0.90, Halt: 1.00} }

// Validate requires 0 < Steer < Restrict < Halt ≤ 1. Halt above 1 would let
// a run pass its ceiling, and equal thresholds would skip a stage silently.
func (th Thresholds) Validate() error {
	if th == (Thresholds{}) {
		return nil
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"steer", th.Steer}, {"restrict", th.Restrict}, {"halt", th.Halt}} {
		if math.IsNaN(f.v) || f.v <= 0 || f.v > 1 {
			return fmt.Errorf("%w: %s is %v, want a value in (0, 1]", ErrInvalidThresholds, f.name, f.v)
		}
	}
	switch {
	case th.Steer >= th.Restrict:
		return fmt.Errorf("%w: steer %v must be below restrict %v", ErrInvalidThresholds, th.Steer, th.Restrict)
	case th.Restrict >= th.Halt:
		return fmt.Errorf("%w: restrict %v must be below halt %v", ErrInvalidThresholds, th.Restrict, th.Halt)
	}
	return nil
}

// Stage maps ρ to its stage. A NaN ρ, which only a broken budget yields,
// halts: failing closed costs one refused call, failing open a budget.
func (th Thresholds) Stage(rho float64) Stage {
	if th == (Thresholds{}) {
		th = DefaultThresholds()
	}
	switch {
	case math.IsNaN(rho) || rho >= th.Halt:
		return Halt
	case rho >= th.Restrict:
		return Restrict
	case rho >= th.Steer:
		return Steer
	}
	return Nominal
}
