package proxy

import "context"

// SweepIdle runs one idle sweep now.
func (s *Server) SweepIdle(ctx context.Context) int { return s.sweepIdle(ctx) }

// ChildID is the id of parent's thread record for a thread key.
func ChildID(parent, key string) string { return childID(parent, key) }
