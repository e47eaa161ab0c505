package ratelimit

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: every
// Scheduler's dispatcher must stop with Close, every waiter must return.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
