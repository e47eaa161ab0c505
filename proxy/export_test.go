package proxy

import (
	"context"

	"gatekeeper/proxy/internal/threadid"
)

// SweepIdle runs one idle sweep now.
func (s *Server) SweepIdle(ctx context.Context) int { return s.sweeper.SweepIdle(ctx) }

// ChildID is the id of parent's thread record for a thread key.
func ChildID(parent, key string) string { return threadid.Child(parent, key) }

// SweepCalls runs one lost-call sweep now; with own, it also reclaims
// every call of this replica.
func (s *Server) SweepCalls(ctx context.Context, own bool) int { return s.sweeper.SweepCalls(ctx, own) }

// Replica is the replica's name.
func (s *Server) Replica() string { return s.replica }

// StartSwept waits for the start's sweep of this replica's own calls.
func (s *Server) StartSwept() { <-s.sweeper.Swept() }

// Owner is what this run writes as its calls' owner.
func (s *Server) Owner() string { return s.owner }

// Beat runs one heartbeat of this replica's calls now.
func (s *Server) Beat(ctx context.Context) { s.sweeper.Beat(ctx) }
