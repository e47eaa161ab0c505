package proxy

import "context"

// SweepIdle runs one idle sweep now.
func (s *Server) SweepIdle(ctx context.Context) int { return s.sweepIdle(ctx) }
