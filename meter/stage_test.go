package meter

import (
	"errors"
	"math"
	"testing"

	"gatekeeper/trajectory"
)

func TestStage(t *testing.T) {
	custom := Thresholds{Steer: 0.5, Restrict: 0.75, Halt: 0.95}
	tests := []struct {
		name string
		th   Thresholds
		rho  float64
		want Stage
	}{
		{"nothing used", DefaultThresholds(), 0, Nominal},
		{"just below steer", DefaultThresholds(), 0.6999, Nominal},
		{"steer starts at its threshold", DefaultThresholds(), 0.70, Steer},
		{"just below restrict", DefaultThresholds(), 0.8999, Steer},
		{"restrict starts at its threshold", DefaultThresholds(), 0.90, Restrict},
		{"just below halt", DefaultThresholds(), 0.9999, Restrict},
		{"halt starts at its threshold", DefaultThresholds(), 1.00, Halt},
		{"past the ceiling", DefaultThresholds(), 1.5, Halt},
		{"infinite", DefaultThresholds(), math.Inf(1), Halt},
		{"NaN fails closed", DefaultThresholds(), math.NaN(), Halt},
		{"negative", DefaultThresholds(), -1, Nominal},
		{"zero value means the defaults", Thresholds{}, 0.69, Nominal},
		{"zero value steers at the default", Thresholds{}, 0.70, Steer},
		{"zero value halts at the default", Thresholds{}, 1.0, Halt},
		{"custom steer", custom, 0.5, Steer},
		{"custom restrict", custom, 0.75, Restrict},
		{"custom halt below the ceiling", custom, 0.95, Halt},
		{"custom nominal", custom, 0.49, Nominal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.th.Stage(tc.rho); got != tc.want {
				t.Errorf("%+v.Stage(%v) = %q, want %q", tc.th, tc.rho, got, tc.want)
			}
		})
	}
}

func TestThresholdsValidate(t *testing.T) {
	tests := []struct {
		name string
		th   Thresholds
		ok   bool
	}{
		{"defaults", DefaultThresholds(), true},
		{"zero value", Thresholds{}, true},
		{"custom", Thresholds{Steer: 0.5, Restrict: 0.8, Halt: 0.95}, true},
		{"halt at the ceiling", Thresholds{Steer: 0.1, Restrict: 0.2, Halt: 1}, true},
		{"steer equals restrict", Thresholds{Steer: 0.9, Restrict: 0.9, Halt: 1}, false},
		{"restrict equals halt", Thresholds{Steer: 0.7, Restrict: 1, Halt: 1}, false},
		{"decreasing", Thresholds{Steer: 0.9, Restrict: 0.7, Halt: 1}, false},
		{"restrict above halt", Thresholds{Steer: 0.5, Restrict: 0.99, Halt: 0.9}, false},
		{"steer above 1", Thresholds{Steer: 1.2, Restrict: 1.3, Halt: 1.4}, false},
		{"halt above 1", Thresholds{Steer: 0.7, Restrict: 0.9, Halt: 1.1}, false},
		{"zero steer", Thresholds{Steer: 0, Restrict: 0.9, Halt: 1}, false},
		{"negative steer", Thresholds{Steer: -0.1, Restrict: 0.9, Halt: 1}, false},
		{"NaN restrict", Thresholds{Steer: 0.7, Restrict: math.NaN(), Halt: 1}, false},
		{"only halt set", Thresholds{Halt: 1}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.th.Validate()
			switch {
			case tc.ok && err != nil:
				t.Errorf("Validate(%+v) = %v", tc.th, err)
			case !tc.ok && !errors.Is(err, ErrInvalidThresholds):
				t.Errorf("Validate(%+v) = %v, want ErrInvalidThresholds", tc.th, err)
			}
		})
	}
}

// TestStageNames: the stage values are the ones the record and the admin
// API spell out.
func TestStageNames(t *testing.T) {
	if string(Nominal) != trajectory.StageNominal {
		t.Errorf("Nominal = %q, record says %q", Nominal, trajectory.StageNominal)
	}
	want := map[Stage]string{Nominal: "nominal", Steer: "steer", Restrict: "restrict", Halt: "halt"}
	for s, name := range want {
		if string(s) != name {
			t.Errorf("stage %q, want %q", s, name)
		}
	}
	dims := map[Dimension]string{Turns: "turns", Tokens: "tokens", WallClock: "wall_clock", Dollars: "dollars"}
	for d, name := range dims {
		if string(d) != name {
			t.Errorf("dimension %q, want %q", d, name)
		}
	}
}
