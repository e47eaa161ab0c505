package telemetry

import (
	"testing"

	"go.uber.org/goleak"
)

// Shutdown must stop the batcher's goroutine.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
