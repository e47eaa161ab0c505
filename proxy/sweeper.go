package proxy

import (
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/proxy/internal/sweep"
)

// liveCalls are this replica's calls in flight as the sweeper beats for
// them: each with the output it has streamed so far.
func (s *Server) liveCalls() []sweep.Call {
	turns := s.live.All()
	calls := make([]sweep.Call, 0, len(turns))
	for _, t := range turns {
		calls = append(calls, sweep.Call{Record: t.recID, ID: t.adm.Call, Output: outcome.EstimateTokens(t.streamed.Load())})
	}
	return calls
}
