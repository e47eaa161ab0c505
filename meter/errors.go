package meter

import "errors"

// Sentinel errors. Failures wrap them with the offending model key or field,
// so callers branch with errors.Is and show the message as it is.
var (
	// ErrInvalidPrice: a price is negative, not finite, too large, or keyed
	// by an empty or malformed model name.
	ErrInvalidPrice = errors.New("meter: invalid price")
	// ErrInvalidThresholds: stage thresholds that are not increasing within
	// (0, 1].
	ErrInvalidThresholds = errors.New("meter: invalid stage thresholds")
)
