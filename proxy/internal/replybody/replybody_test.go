package replybody_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"gatekeeper/approvals"
	"gatekeeper/proxy/internal/escrow"
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/proxy/internal/replybody"
	"gatekeeper/streaming"
	"gatekeeper/streaming/anthropic"
)

// turn is a replybody.Turn that keeps what it was told.
type turn struct {
	stop    replybody.Stop
	settles []settled
	errs    []int // statuses of SettleError
}

type settled struct {
	res    *streaming.Result
	status int
	cause  error
}

var _ replybody.Turn = (*turn)(nil)

func (t *turn) Settle(res *streaming.Result, status int, cause error) {
	t.settles = append(t.settles, settled{res, status, cause})
}
func (t *turn) SettleError(status int, _ []byte) { t.errs = append(t.errs, status) }
func (t *turn) Stopped() replybody.Stop          { return t.stop }
func (t *turn) OpenHold(*streaming.Result, escrow.Reply, []escrow.Gated) (*approvals.Hold, *escrow.Client, error) {
	return nil, nil, errors.New("no escrow in this test")
}

const (
	head = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-test\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":5}}\n\n"
	tail = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
)

// upstream yields its text, then err (io.EOF when nil).
type upstream struct {
	r   io.Reader
	err error
}

func (u *upstream) Read(p []byte) (int, error) {
	n, err := u.r.Read(p)
	if err == io.EOF && u.err != nil {
		err = u.err
	}
	return n, err
}
func (u *upstream) Close() error { return nil }

func newStream(t *testing.T, tn *turn, src io.ReadCloser) *replybody.Stream {
	t.Helper()
	d := anthropic.Dialect{}
	f, err := d.NewCallFilter(func(string) bool { return true }, func(streaming.ToolCall) string { return "refused" })
	if err != nil {
		t.Fatal(err)
	}
	f.Hold()
	return replybody.NewStream(replybody.Reply{Turn: tn, Dialect: d, Extras: &streaming.Extras{}}, src,
		replybody.Streamed{Filter: f, Keepalive: -1, MaxEventBytes: 1 << 20, Buf: make([]byte, 4096)})
}

func TestStream(t *testing.T) {
	broken := errors.New("connection reset")
	tests := []struct {
		name     string
		body     string
		upErr    error
		stop     replybody.Stop
		wantErr  error
		wantOut  func(out string) bool
		recorded bool  // the turn was recorded before the reply's end reached the agent
		cause    error // of the record at Close
	}{
		{name: "whole", body: head + tail, recorded: true,
			wantOut: func(out string) bool { return out == head+tail }},
		{name: "truncated", body: head + "event: message_st", wantErr: replybody.ErrTruncated, cause: replybody.ErrTruncated,
			wantOut: func(out string) bool { return out == head }},
		{name: "broken", body: head, upErr: broken, wantErr: broken, cause: broken,
			wantOut: func(out string) bool { return out == head }},
		{name: "killed", body: head, upErr: broken, stop: replybody.Stop{Kind: outcome.Killed},
			wantErr: replybody.ErrKilled, cause: replybody.ErrKilled,
			wantOut: func(out string) bool { return out == head }},
		{name: "canceled", body: head, upErr: broken, recorded: true,
			stop: replybody.Stop{Kind: outcome.Canceled, Type: "trajectory_canceled", Msg: "canceled by an operator"},
			wantOut: func(out string) bool {
				return strings.HasPrefix(out, head) && strings.Contains(out[len(head):], "canceled by an operator")
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tn := &turn{stop: tt.stop}
			b := newStream(t, tn, &upstream{r: strings.NewReader(tt.body), err: tt.upErr})
			out, err := io.ReadAll(b)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("read error %v, want %v", err, tt.wantErr)
			}
			if !tt.wantOut(string(out)) {
				t.Errorf("the agent got %q", out)
			}
			if got := len(tn.settles) > 0; got != tt.recorded {
				t.Fatalf("recorded before the reply's end: %v, want %v", got, tt.recorded)
			}
			if tt.recorded && (tn.settles[0].cause != nil || tn.settles[0].status != http.StatusOK) {
				t.Errorf("recorded with %+v", tn.settles[0])
			}
			before := len(tn.settles)
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if err := b.Close(); err != nil || len(tn.settles) != before+1 {
				t.Fatalf("Close recorded %d times, err %v; want once", len(tn.settles)-before, err)
			}
			if last := tn.settles[len(tn.settles)-1]; !errors.Is(last.cause, tt.cause) {
				t.Errorf("recorded at Close with cause %v, want %v", last.cause, tt.cause)
			}
		})
	}
}

func TestJSON(t *testing.T) {
	const reply = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":10,"output_tokens":5}}`
	tests := []struct {
		name      string
		status    int
		limit     int64
		wantCause bool
	}{
		{name: "whole", status: http.StatusOK, limit: 1 << 20},
		{name: "over its limit", status: http.StatusOK, limit: 8},
		{name: "upstream error", status: http.StatusBadGateway, limit: 1 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tn := &turn{}
			b := replybody.NewJSON(replybody.Reply{Turn: tn, Dialect: anthropic.Dialect{}, Extras: &streaming.Extras{}},
				io.NopCloser(strings.NewReader(reply)), tt.status, tt.limit)
			out, err := io.ReadAll(b)
			if err != nil || string(out) != reply {
				t.Fatalf("read %q, %v", out, err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if tt.status != http.StatusOK {
				if len(tn.errs) != 1 || tn.errs[0] != tt.status || len(tn.settles) != 0 {
					t.Fatalf("error records %v, settles %d", tn.errs, len(tn.settles))
				}
				return
			}
			if len(tn.settles) != 1 || len(tn.errs) != 0 {
				t.Fatalf("settles %d, error records %v: want one settle", len(tn.settles), tn.errs)
			}
			if s := tn.settles[0]; s.cause != nil || tt.limit > int64(len(reply)) && s.res.Usage.OutputTokens != 5 {
				t.Errorf("recorded %+v (usage %+v)", s, s.res.Usage)
			}
		})
	}
}
