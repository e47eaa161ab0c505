package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"gatekeeper/proxy/internal/threadid"
	"gatekeeper/proxy/internal/wire"
	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

// rootID decides which trajectory a request belongs to, in order: path
// prefix, X-Gatekeeper-Trajectory, the client's own session id (a header,
// else the body's hint; scoped to the virtual key), and else the run of
// its conversation: a first turn begins a new one; a later turn finds the
// run its first reply was linked to (linkedRun).
func (t *turn) rootID(ctx context.Context, r *http.Request) (string, error) {
	req, pr := t.req, t.pr
	if req.trajectoryID != "" {
		return req.trajectoryID, nil
	}
	if id, err := wire.HeaderRun(r.Header, req.keyHash); id != "" || err != nil {
		return id, err
	}
	if pr.SessionHint != "" {
		return threadid.Session(req.keyHash, pr.SessionHint), nil
	}
	if !pr.Replied {
		t.linkReply = true
		return threadid.Fresh(), nil
	}
	// A turn that goes on from a Responses reply the provider keeps links
	// its own reply in turn: the next names only it.
	t.linkReply = isResponseMark(pr.FirstReply)
	return t.s.linkedRun(ctx, req.keyHash, pr)
}

// linkedRun is the run of a later turn of a conversation that names no
// session: the one its first reply's mark links to, one round trip; else
// (the link expired, was never written, or the reply has no mark) the
// conversation's own run for that reply. A store failure fails closed.
func (s *Server) linkedRun(ctx context.Context, keyHash [32]byte, pr *streaming.Request) (string, error) {
	if pr.FirstReply != "" && s.links != nil {
		id, err := s.links.Linked(ctx, threadid.Link(keyHash, pr.FirstReply))
		switch {
		case err == nil && trajectory.ValidID(id):
			return id, nil
		case err != nil && !errors.Is(err, trajectory.ErrNotFound):
			return "", storeErr(err)
		}
	}
	return threadid.Conversation(keyHash, pr.Fingerprint, pr.FirstReply), nil
}

// linkRun links the marks of the turn's reply res to the turn's run, so
// that the conversation's later turns, which replay it, find the run: the
// reply's first client call, on a conversation's first turn, and a
// Responses reply's id, which a later turn may name alone. It runs before
// the agent has the whole reply. A failure is logged: later turns then go
// to the conversation's own run (linkedRun), never to another's.
func (t *turn) linkRun(res *streaming.Result) {
	if !t.linkReply || res == nil || t.s.links == nil {
		return
	}
	t.linkReply = false
	marks := make([]string, 0, 2)
	if !t.pr.Replied {
		if m := streaming.ReplyMark(res); m != "" {
			marks = append(marks, m)
		}
	}
	if t.req.api == streaming.APIResponses {
		if m := streaming.ResponseMark(res.MessageID); m != "" {
			marks = append(marks, m)
		}
	}
	ctx := context.WithoutCancel(t.ctx)
	ttl := t.req.rules.cfg.Store.Retention.Std()
	for _, m := range marks {
		if err := t.s.links.Link(ctx, threadid.Link(t.req.keyHash, m), t.root, ttl); err != nil {
			t.log.LogAttrs(ctx, slog.LevelWarn, "linking a reply to its run failed; the conversation's later turns go to a run of their own",
				slog.String("error", err.Error()))
		}
	}
}

func isResponseMark(m string) bool {
	return len(m) > 5 && (m[:5] == "resp:" || m[:5] == "resp#")
}
