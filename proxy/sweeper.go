package proxy

import (
	"sync"
	"time"

	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/proxy/internal/sweep"
)

// jsonOutputRate is the output, in tokens a second, that the heartbeat
// reports for a non-streamed call so far, up to its output limit: nothing
// streams to count, and a call taken for lost is charged this estimate
// (README.md, Reliability).
const jsonOutputRate = 100

// liveCalls are this replica's calls the sweeper beats for: each call in
// flight with the output it has streamed so far (a non-streamed one, its
// estimate at jsonOutputRate), and each call whose reply ended but whose
// charge waits for the store, with its reply's output.
func (s *Server) liveCalls() []sweep.Call {
	turns := s.live.All()
	now := s.now()
	s.waitingMu.Lock()
	defer s.waitingMu.Unlock()
	calls := make([]sweep.Call, 0, len(turns)+len(s.waiting))
	for _, t := range turns {
		calls = append(calls, sweep.Call{Record: t.recID, ID: t.adm.Call, Output: t.outputSoFar(now)})
	}
	for _, c := range s.waiting {
		calls = append(calls, c)
	}
	return calls
}

// outputSoFar is the turn's output so far, in tokens: estimated from the
// bytes streamed, or, for a non-streamed reply, jsonOutputRate for each
// second since the turn began, up to its output limit.
func (t *turn) outputSoFar(now time.Time) int64 {
	if t.pr.Stream {
		return outcome.EstimateTokens(t.streamed.Load())
	}
	out := int64(now.Sub(t.started).Seconds() * jsonOutputRate)
	if t.maxOut > 0 {
		out = min(out, t.maxOut)
	}
	return max(out, 0)
}

// waitingSettle keeps call on record rec, whose reply ended with output
// tokens, among the calls the sweeper beats for while its charge waits
// for the store; the func it returns takes it off.
func (s *Server) waitingSettle(rec, call string, output int64) func() {
	s.waitingMu.Lock()
	s.waiting[call] = sweep.Call{Record: rec, ID: call, Output: output}
	s.waitingMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.waitingMu.Lock()
			delete(s.waiting, call)
			s.waitingMu.Unlock()
		})
	}
}
