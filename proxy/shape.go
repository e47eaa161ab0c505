package proxy

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/sjson"

	"gatekeeper/meter"
	"gatekeeper/proxy/internal/notice"
	"gatekeeper/streaming"
)

// shape rewrites an admitted request for its budget stage, the loop
// watchdog's step and metering, minimally and at the end:
//   - steer: a budget notice is appended as the last content;
//   - restrict: tools outside the tenant's read_only_tools are removed
//     (with a tool_choice naming one), the notice asks for a final answer,
//     and calls to removed tools in the reply are withheld;
//   - the loop watchdog's notice, when its step has one, is appended after
//     it, and its restrict step narrows the tools as the budget's does;
//   - a streamed Chat request is asked to report usage, and the extra
//     usage is taken out of what the agent receives.
func (t *turn) shape(body []byte) ([]byte, error) {
	api := t.req.api
	if t.maxOut > 0 && t.maxOut != t.pr.MaxOutputTokens {
		field := t.pr.MaxOutputField
		if field == "" {
			field = dialectOf(api).outputField
		}
		out, err := sjson.SetBytes(body, field, t.maxOut)
		if err != nil {
			return nil, httpErr(http.StatusBadRequest, errInvalidRequest, "could not set the output limit: "+err.Error())
		}
		if body, _, err = thinkingBelow(api, out, t.maxOut); err != nil {
			return nil, httpErr(http.StatusBadRequest, errInvalidRequest, "could not fit the thinking budget under the output limit: "+err.Error())
		}
	}
	if t.truncated > 0 {
		if out, err := streamOf(api).AppendNotice(body, notice.Truncation(t.truncated)); err == nil {
			body = out
		}
	}
	if t.interrupt != "" {
		out, err := streamOf(api).AppendNotice(body, "[message from the operator] "+t.interrupt)
		if err != nil {
			t.log.LogAttrs(t.ctx, slog.LevelWarn, "operator message not appended", slog.String("error", err.Error()))
		} else {
			body = out
		}
	}
	stage := t.adm.decision.Stage
	if stage == meter.Restrict || t.loop.restrict {
		out, removed, err := streamOf(api).RestrictTools(body, t.readOnly)
		if err != nil {
			return nil, httpErr(http.StatusBadRequest, errInvalidRequest, "could not narrow the request's tools: "+err.Error())
		}
		body, t.removed = out, removed
		if t.filter, err = streamOf(api).NewCallFilter(t.readOnly, t.refusal); err != nil {
			return nil, err
		}
		t.filter.Grant() // an unknown call type is no read-only tool
	}
	var notices []string
	if stage == meter.Restrict || stage == meter.Steer {
		notices = append(notices, t.notice())
	}
	if t.loop.notice != "" {
		notices = append(notices, t.loop.notice)
	}
	for _, n := range notices {
		out, err := streamOf(api).AppendNotice(body, n)
		if err != nil {
			// A request without a conversation to append to is forwarded
			// as it is; the provider will judge it.
			t.log.LogAttrs(t.ctx, slog.LevelWarn, "notice not appended", slog.String("error", err.Error()))
			break
		}
		body = out
	}
	if dialectOf(api).askUsage && t.pr.Stream {
		out, added, err := streaming.EnsureIncludeUsage(body)
		if err == nil {
			body, t.stripUsage = out, added
		}
	}
	return body, nil
}

// clampOutput is a call's output limit under the tenant's ceiling: the
// lower of the two, the ceiling when the agent set none; 0 when neither.
func clampOutput(asked int64, ceiling int) int64 {
	c := int64(ceiling)
	switch {
	case c <= 0:
		return asked
	case asked <= 0 || asked > c:
		return c
	}
	return asked
}

// readOnly reports whether a tool is in the tenant's read-only grant.
func (t *turn) readOnly(name string) bool { return slices.Contains(t.req.tenant.ReadOnlyTools, name) }

// refusal replaces a call withheld in the budget's restrict stage, or in
// the loop watchdog's.
func (t *turn) refusal(call streaming.ToolCall) string {
	if t.adm.decision.Stage != meter.Restrict {
		return notice.LoopRefusal(call)
	}
	return fmt.Sprintf("[gatekeeper] The call to %s was withheld: this run's budget is nearly spent (%.0f%% of its %s budget), so only read-only tools may run. Give your final answer.",
		call.Name, t.adm.decision.Rho*100, t.adm.decision.Binding)
}

// filterJSON applies the call filter to a whole non-streamed reply before
// any of it reaches the agent: a withheld call must never be delivered.
func (t *turn) filterJSON(resp *http.Response, cutOnly bool) error {
	limit := t.s.cfg.Limits.MaxBodyBytes
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if cutOnly && (err != nil || int64(len(raw)) > limit) {
		// Nothing is restricted: a reply too large to check goes on as
		// it comes (its decoding, not its delivery, fails).
		resp.Body = readCloser{io.MultiReader(bytes.NewReader(raw), errReader{err}, resp.Body), resp.Body}
		return nil
	}
	_ = resp.Body.Close()
	if err == nil && int64(len(raw)) > limit {
		err = fmt.Errorf("reply larger than limits.max_body_bytes (%d) cannot be checked for withheld calls", limit)
	}
	var out []byte
	if err == nil {
		if out, err = t.filter.Body(raw); err != nil {
			err = fmt.Errorf("checking the reply for withheld calls: %w", err)
		}
	}
	if err != nil && cutOnly {
		out, err = raw, nil // not JSON: delivered as it came, the decoder says why
	}
	if err != nil {
		// The provider produced the reply: it is charged, undelivered.
		res, _ := streamOf(t.req.api).DecodeJSON(raw)
		t.chargeUndelivered(res, int64(len(raw)), err)
		return err
	}
	if len(t.filter.Withheld()) > 0 {
		// The decoder reads what the agent receives; the watchdog counts
		// what the model proposed.
		if res, err := streamOf(t.req.api).DecodeJSON(raw); err == nil {
			t.proposed = t.seeReply(res)
		}
	}
	resp.Body = io.NopCloser(&wholeReader{out})
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	return nil
}

// wholeReader hands out b, with io.EOF along with its last bytes as an
// HTTP body of known length gives it: the turn is recorded before they
// reach the agent (see jsonBody.Read).
type wholeReader struct{ b []byte }

func (r *wholeReader) Read(p []byte) (int, error) {
	n := copy(p, r.b)
	r.b = r.b[n:]
	if len(r.b) == 0 {
		return n, io.EOF
	}
	return n, nil
}

// readCloser reads from r and closes c.
type readCloser struct {
	io.Reader
	c io.Closer
}

func (r readCloser) Close() error { return r.c.Close() }

// errReader fails every read with err, or ends when err is nil.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return 0, io.EOF
}

// withheld reports whether the call filter withheld the call with id.
func (t *turn) withheld(id string) bool {
	if t.filter == nil {
		return false
	}
	for _, c := range t.filter.Withheld() {
		if c.ID == id {
			return true
		}
	}
	return false
}

func allowAll(string) bool { return true }

// stageNote is the turn's stage and rewrite for the event log.
func (t *turn) stageNote(data map[string]any) {
	if st := t.adm.decision.Stage; st != "" && st != meter.Nominal {
		data["stage"] = st
	}
	if len(t.removed) > 0 {
		data["removed_tools"] = strings.Join(t.removed, ",")
	}
	if t.loop.step != "" {
		data["loop_step"] = t.loop.step
	}
}
