package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"gatekeeper/feed"
)

// streamKeepalive is how often an idle stream gets an SSE comment, so that
// proxies and browsers keep it open.
const streamKeepalive = 15 * time.Second

// maxFilterID bounds a tenant or trajectory named in a stream filter.
const maxFilterID = 1024

// EventStream is what the admin API needs of the live event stream.
type EventStream interface {
	Subscribe(ctx context.Context, f feed.Filter, after feed.ID) (*feed.Subscription, error)
}

// KeysView reports the latest rate-limit figures of this process.
type KeysView interface {
	Snapshot() feed.KeysSnapshot
}

var (
	_ EventStream = (*feed.Feed)(nil)
	_ KeysView    = (*feed.Keys)(nil)
)

// WithStream serves GET /admin/v1/stream from s and GET /admin/v1/keys
// from k. Without it both answer 404.
func WithStream(s EventStream, k KeysView) Option {
	return func(a *API) { a.stream, a.keys = s, k }
}

var errStreamOff = &Error{Code: http.StatusNotFound, Type: "not_found_error", Msg: "the event stream is not configured"}

// ParseStreamFilter reads a stream's query: tenant, trajectory (with its
// descendants) and kind (a comma-separated list).
func ParseStreamFilter(q url.Values) (feed.Filter, error) {
	f := feed.Filter{Tenant: q.Get("tenant"), Trajectory: q.Get("trajectory")}
	if len(f.Tenant) > maxFilterID || len(f.Trajectory) > maxFilterID {
		return feed.Filter{}, badRequest("tenant and trajectory are at most 1024 bytes")
	}
	for _, v := range q["kind"] {
		for k := range strings.SplitSeq(v, ",") {
			k := feed.Kind(strings.TrimSpace(k))
			if k == "" {
				continue
			}
			if !k.Valid() {
				return feed.Filter{}, badRequest("unknown kind " + jsonQuote(string(k)) + " (want record, turn, approval or keys)")
			}
			f.Kinds = append(f.Kinds, k)
		}
	}
	return f, nil
}

func jsonQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// streamEvents serves the live event stream as Server-Sent Events. A
// Last-Event-ID header resumes after that event: what the log still keeps
// comes first, then live events; a resume point older than the log keeps
// opens with a reset event. A subscriber that falls too far behind gets a
// final dropped event naming the last event it got, and can resume from
// it.
func (a *API) streamEvents(w http.ResponseWriter, r *http.Request, c caller) error {
	if a.stream == nil {
		return errStreamOff
	}
	f, err := ParseStreamFilter(r.URL.Query())
	if err != nil {
		return err
	}
	// Replayed or live, another tenant's events never reach a scoped
	// token: the feed filters both with the scope.
	f.Scope = c.tenants
	var after feed.ID
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		if after, err = feed.ParseID(v); err != nil {
			return badRequest("Last-Event-ID must be an event id from this stream (<ms>-<seq>)")
		}
	}
	ctx := r.Context()
	sub, err := a.stream.Subscribe(ctx, f, after)
	if err != nil {
		return err
	}
	defer sub.Close()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if sub.Gap {
		writeControl(w, feed.KindReset, map[string]string{"reason": "the stream no longer keeps the events after Last-Event-ID; reload and follow from here", "after": after.String()})
	}
	if rc.Flush() != nil {
		return nil
	}
	var buf []byte // the events' framing, reused
	for {
		nctx, cancel := context.WithTimeout(ctx, streamKeepalive)
		ev, err := sub.Next(nctx)
		cancel()
		switch {
		case err == nil:
			if buf, err = writeEvent(w, buf[:0], &ev); err != nil {
				return nil
			}
			// What else is already there goes out with it, in one flush.
			for range streamBatch {
				ev, ok := sub.TryNext()
				if !ok {
					break
				}
				if buf, err = writeEvent(w, buf[:0], &ev); err != nil {
					return nil
				}
			}
		case errors.Is(err, feed.ErrDropped):
			writeControl(w, feed.KindDropped, map[string]string{
				"reason": "this subscriber fell too far behind; reconnect with Last-Event-ID to resume", "last_id": sub.Last().String()})
			_ = rc.Flush()
			return nil
		case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			if _, err := io.WriteString(w, ": keepalive\n\n"); err != nil {
				return nil
			}
		default: // the client left, or gatekeeper is closing
			return nil
		}
		if rc.Flush() != nil {
			return nil
		}
	}
}

// writeEvent writes ev as one SSE event: its id, its kind as the event
// name and the whole event as data (JSON on one line).
// The feed encodes an event once for all of its subscribers.
// It is framed in b, the subscriber's scratch buffer, which it returns.
func writeEvent(w io.Writer, b []byte, ev *feed.Event) ([]byte, error) {
	data := ev.JSON()
	b = append(b, "id: "...)
	b = append(b, ev.ID...)
	b = append(b, "\nevent: "...)
	b = append(b, ev.Kind...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	b = append(b, "\n\n"...)
	_, err := w.Write(b)
	return b, err
}

// streamBatch bounds the events written between two flushes.
const streamBatch = 64

// writeControl writes an event meant for this subscriber alone. It
// carries no id: a client's Last-Event-ID stays the last real event's.
func writeControl(w io.Writer, k feed.Kind, data map[string]string) {
	b, _ := json.Marshal(map[string]any{"kind": k, "at": time.Now().UTC(), "data": data})
	_, _ = io.WriteString(w, "event: "+string(k)+"\ndata: "+string(b)+"\n\n")
}

// whoami answers the calling token's name, roles and tenants (when it is
// scoped to some), so that the console
// offers only the actions the token may take, and the budget stages'
// thresholds it draws on budget bars.
func (a *API) whoami(w http.ResponseWriter, _ *http.Request, c caller) error {
	roles := c.roles
	if roles == nil {
		roles = []string{}
	}
	out := map[string]any{"name": c.name, "roles": roles, "budget_stages": a.config().Stages}
	if c.tenants != nil {
		out["tenants"] = c.tenants
	}
	if c.session != nil {
		// The console page sends it back on every call that changes
		// something (CSRFHeader).
		out["csrf_token"] = c.session.CSRF
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// keyView is one provider key in GET /admin/v1/keys.
type keyView struct {
	Key       string   `json:"key"` // provider/keyname, never the secret
	RPM       int      `json:"rpm"`
	InputTPM  int64    `json:"input_tpm"`
	OutputTPM int64    `json:"output_tpm"`
	Headroom  *float64 `json:"headroom"` // null until a turn used the key on this replica
}

// keysHeadroom answers every configured provider key with its limits and
// the latest headroom this process saw, and the queue length per class.
func (a *API) keysHeadroom(w http.ResponseWriter, _ *http.Request, _ caller) error {
	if a.keys == nil {
		return errStreamOff
	}
	snap := a.keys.Snapshot()
	keys := []keyView{}
	for _, p := range a.config().Providers {
		for _, k := range p.Keys {
			v := keyView{Key: p.Name + "/" + k.Name, RPM: k.RPM, InputTPM: k.InputTPM, OutputTPM: k.OutputTPM}
			if h, ok := snap.Headroom[v.Key]; ok {
				v.Headroom = &h
			}
			keys = append(keys, v)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"keys": keys, "queues": snap.Queues})
	return nil
}
