package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written as "2h", "10m", "90s", "1h30m" or as a
// whole number of seconds, in YAML and in JSON alike. It marshals back in
// Go's duration notation.
type Duration time.Duration

var errDuration = errors.New(`want a duration such as "90s", "10m", "2h" or whole seconds`)

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String returns d in Go's duration notation, e.g. "2h0m0s".
func (d Duration) String() string { return time.Duration(d).String() }

// parseDuration accepts Go duration notation or whole seconds; digits alone
// are seconds so that a quoted "90" means what an unquoted 90 means.
func parseDuration(s string) (Duration, error) {
	if s == "" {
		return 0, errDuration
	}
	if secs, err := strconv.ParseInt(s, 10, 64); err == nil {
		return secondsDuration(secs)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errDuration
	}
	return Duration(d), nil
}

func secondsDuration(secs int64) (Duration, error) {
	if secs > math.MaxInt64/int64(time.Second) || secs < math.MinInt64/int64(time.Second) {
		return 0, fmt.Errorf("%d seconds is out of range", secs)
	}
	return Duration(time.Duration(secs) * time.Second), nil
}

// UnmarshalYAML accepts a YAML integer (seconds) or a string. Problems are
// returned as *yaml.TypeError so the decoder keeps going and reports every
// bad value of the file, each with its line.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	bad := func(err error) error {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: invalid duration: %v", n.Line, err)}}
	}
	if n.Kind != yaml.ScalarNode {
		return bad(errDuration)
	}
	var (
		v   Duration
		err error
	)
	switch n.ShortTag() {
	case "!!int":
		var secs int64
		if derr := n.Decode(&secs); derr != nil {
			return bad(errDuration)
		}
		v, err = secondsDuration(secs)
	case "!!str":
		v, err = parseDuration(n.Value)
	default:
		err = errDuration
	}
	if err != nil {
		return bad(err)
	}
	*d = v
	return nil
}

// MarshalYAML writes d in Go's duration notation.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// MarshalJSON writes d as a JSON string in Go's duration notation.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON accepts a JSON string (duration notation or whole seconds) or
// a JSON integer of seconds; null leaves d unchanged.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := parseDuration(s)
		if err != nil {
			return fmt.Errorf("config: invalid duration: %w", err)
		}
		*d = v
		return nil
	}
	secs, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("config: invalid duration: %w", errDuration)
	}
	v, err := secondsDuration(secs)
	if err != nil {
		return fmt.Errorf("config: invalid duration: %w", err)
	}
	*d = v
	return nil
}
