package redis

import (
	"testing"
	"time"

	"gatekeeper/internal/redistest"
	"gatekeeper/store/storetest"
)

// TestSessionsContract runs the session store's contract on a real
// redis-server, with Redis's own expiry. A session is one key, so a
// cluster adds nothing to what is tested here.
func TestSessionsContract(t *testing.T) {
	s := redistest.StartServer(t)
	r := redistest.Target{Name: "single", URL: s.URL, Flush: s.Flush}
	storetest.RunSessions(t, func(t *testing.T) storetest.SessionStore {
		r.Flush(t)
		return NewSessions(r.Client(t))
	}, func(_ *testing.T, d time.Duration) { time.Sleep(d) })
}
