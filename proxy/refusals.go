package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"gatekeeper/proxy/internal/admit"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/escrow"
	"gatekeeper/proxy/internal/keys"
	"gatekeeper/streaming"
	"gatekeeper/trajectory"
)

// Refusals are visible: every request gatekeeper answers with an error of
// its own (a budget spent, a run ended or paused, a call refused, its own
// rate limits, its store out...) is a log line with its tenant, run and
// reason, a count in gatekeeper_refusals_total{tenant,reason}, and, at
// most once per run every refusalEvery on this replica, a refused event on
// the run's record counting those folded into it (not for a 503: the store
// that did not answer would be waited for again): an agent looping on
// refusals shows on the console and the event stream.

// refusalEvery is the least time between two refused events of one run
// on one replica.
const refusalEvery = 10 * time.Second

// maxRefusalRuns bounds the runs whose last refused event is remembered.
const maxRefusalRuns = 4096

// refusalReasons is the closed set of a refusal's reason label: the error
// types gatekeeper writes, and refusalOther for any other.
var refusalReasons = map[string]bool{
	apierr.Authentication: true, apierr.Permission: true, apierr.InvalidRequest: true,
	apierr.TrajectoryCanceled: true, apierr.TrajectoryPaused: true, apierr.Upstream: true,
	apierr.NotFound: true, apierr.BudgetExceeded: true, apierr.RateLimited: true,
	apierr.ApprovalRefused: true, apierr.Internal: true,
}

const refusalOther = "other"

// refusalReason is typ when it is one of refusalReasons, else refusalOther.
func refusalReason(typ string) string {
	if refusalReasons[typ] {
		return typ
	}
	return refusalOther
}

// refusalLimiter says when a run's next refused event is due, and counts
// the refusals folded in between.
type refusalLimiter struct {
	mu    sync.Mutex
	every time.Duration
	runs  map[string]*refusalWindow
}

type refusalWindow struct {
	last   time.Time // the last event written
	folded int       // refusals since, with no event of their own
}

func newRefusalLimiter(every time.Duration) *refusalLimiter {
	return &refusalLimiter{every: every, runs: make(map[string]*refusalWindow)}
}

// due reports whether a refusal of run at now gets an event, and if so
// how many refusals of run since its last event had none.
func (l *refusalLimiter) due(run string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.runs[run]
	if w != nil && now.Sub(w.last) < l.every {
		w.folded++
		return false, 0
	}
	folded := 0
	if w != nil {
		folded = w.folded
	} else {
		if len(l.runs) >= maxRefusalRuns {
			l.forget(now)
		}
		w = &refusalWindow{}
		l.runs[run] = w
	}
	w.last, w.folded = now, 0
	return true, folded
}

// forget drops the runs whose window has passed (their next refusal gets
// an event anyway, its earlier folded count lost), or every run when none
// has. The caller holds mu.
func (l *refusalLimiter) forget(now time.Time) {
	for run, w := range l.runs {
		if now.Sub(w.last) >= l.every {
			delete(l.runs, run)
		}
	}
	if len(l.runs) >= maxRefusalRuns {
		clear(l.runs)
	}
}

// refusedData is a refused event's data.
type refusedData struct {
	Status    int    `json:"status"`
	Reason    string `json:"reason"`
	Message   string `json:"message"`
	RequestID string `json:"request_id,omitempty"`
	// Folded counts the run's refusals on this replica since its previous
	// refused event that got no event of their own.
	Folded int `json:"folded"`
}

// writeError answers the agent's request with err in api's error form
// (apierr.Write) and, when it is a refusal of gatekeeper's own, makes it
// visible (refused). req is nil before the request was routed.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, api streaming.API, req *request, err error) {
	s.refused(r.Context(), req, err)
	apierr.Write(w, api, err)
}

// agentError is err in the agent's error form, apierr.Write's: the one
// mapping of the refusals of the packages under proxy, kept beside the
// writer. An *admit.Refusal, a *keys.Refusal and an *escrow.Answer become
// the apierr.Error they describe (an admission refusal of no other kind
// is the store failing, a 503 to retry); any other error, an
// apierr.Error above all, is returned as it is. Every turn asks (with
// nil, mostly): it looks for no target on the heap.
func agentError(err error) error {
	if err == nil {
		return nil
	}
	if a, ok := errors.AsType[*escrow.Answer](err); ok {
		return &apierr.Error{Code: a.Status, Type: a.Type, Msg: a.Msg, RetryAfter: a.RetryAfter, NoRetry: a.NoRetry, Err: a.Err}
	}
	if _, ok := errors.AsType[*apierr.Error](err); ok {
		return err
	}
	if r, ok := errors.AsType[*keys.Refusal](err); ok {
		typ := apierr.RateLimited
		if r.Status != http.StatusTooManyRequests {
			typ = apierr.Upstream
		}
		return &apierr.Error{Code: r.Status, Type: typ, RetryAfter: r.RetryAfter, Msg: r.Msg, Err: r.Err}
	}
	r, ok := errors.AsType[*admit.Refusal](err)
	if !ok {
		return err
	}
	switch r.Kind {
	case admit.Exhausted:
		return &apierr.Error{Code: http.StatusPaymentRequired, Type: apierr.BudgetExceeded, NoRetry: true, Msg: r.Msg, Err: r.Err}
	case admit.Contended:
		return &apierr.Error{Code: http.StatusTooManyRequests, Type: apierr.RateLimited, RetryAfter: r.RetryAfter, Msg: r.Msg, Err: r.Err}
	case admit.OperatorsOnly:
		return &apierr.Error{Code: http.StatusForbidden, Type: apierr.Permission, NoRetry: true, Msg: r.Msg, Err: r.Err}
	case admit.RunEnded:
		return &apierr.Error{Code: http.StatusForbidden, Type: apierr.TrajectoryCanceled, NoRetry: true, Msg: r.Msg, Err: r.Err}
	case admit.Paused:
		return &apierr.Error{Code: http.StatusServiceUnavailable, Type: apierr.TrajectoryPaused, RetryAfter: r.RetryAfter, Msg: r.Msg, Err: r.Err}
	}
	if errors.As(r.Err, new(*apierr.Error)) || errors.As(r.Err, new(*admit.Refusal)) {
		return r.Err
	}
	return &apierr.Error{Code: http.StatusServiceUnavailable, Type: apierr.Internal,
		Msg: "gatekeeper's store is unavailable, so no new turn can be admitted; retry shortly", RetryAfter: 5e9, Err: r.Err}
}

// refused logs, counts and records the refusal err of req: everything
// apierr.Write answers with an error body (an agent gone, or a reply
// aborted after it began, is no refusal).
func (s *Server) refused(ctx context.Context, req *request, err error) {
	if errors.Is(err, http.ErrAbortHandler) || errors.Is(err, apierr.ErrClientGone) {
		return
	}
	var he *apierr.Error
	if !errors.As(err, &he) {
		he = &apierr.Error{Code: http.StatusInternalServerError, Type: apierr.Internal, Msg: "gatekeeper failed to handle the request"}
	}
	var tenant, run, id string
	if req != nil {
		id, run = req.id, req.run
		if req.tenant != nil {
			tenant = req.tenant.Name
		}
	}
	reason := refusalReason(he.Type)
	level := slog.LevelInfo
	if he.Code >= http.StatusInternalServerError {
		level = slog.LevelWarn
	}
	s.log.LogAttrs(ctx, level, "request refused", slog.String("request_id", id), slog.String("tenant", tenant),
		slog.String("trajectory", run), slog.String("reason", reason), slog.Int("status", he.Code), slog.String("message", he.Msg))
	s.tel.Refused(tenant, reason)
	// A run's event needs the store: a refusal because the store did not
	// answer (503) would only wait for it again, on the agent's time.
	if run == "" || he.Code == http.StatusServiceUnavailable {
		return
	}
	now := s.now()
	due, folded := s.refusals.due(run, now)
	if !due {
		return
	}
	data, _ := json.Marshal(refusedData{Status: he.Code, Reason: reason, Message: he.Msg, RequestID: id, Folded: folded}) // plain fields: never fails
	ev := trajectory.Event{At: now, Type: trajectory.EventRefused, Reason: reason, Data: data}
	wctx := context.WithoutCancel(ctx)
	// Written with the record, not appended alone: the live event stream
	// (and the console on it) sees record writes with their entries.
	_, uerr := s.store.Update(wctx, run, func(*trajectory.Record) ([]trajectory.Event, error) {
		return []trajectory.Event{ev}, nil
	})
	if uerr != nil && !errors.Is(uerr, trajectory.ErrNotFound) {
		s.log.LogAttrs(wctx, slog.LevelWarn, "recording a refusal failed", slog.String("trajectory", run), slog.String("error", uerr.Error()))
	}
}
