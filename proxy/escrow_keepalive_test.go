package proxy_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3/responses"
)

// keepaliveStream reads a held stream through an official SDK in the
// background and counts the events the SDK hands to the application after
// the reply's text and before any tool call: what an agent's idle watchdog
// sees while a call is held.
type keepaliveStream struct {
	alive atomic.Int64 // SDK-visible keepalive events seen so far
	tool  atomic.Bool  // a tool call reached the application
	done  chan struct{}
	err   error
	final any // anthropic.Message or responses.Response
}

func (k *keepaliveStream) wait(t *testing.T) any {
	t.Helper()
	select {
	case <-k.done:
	case <-time.After(20 * time.Second):
		t.Fatal("stream did not end within 20 s")
	}
	if k.err != nil {
		t.Fatalf("stream: %v", k.err)
	}
	return k.final
}

func keepaliveAnthropic(ctx context.Context, base, key, spec string) *keepaliveStream {
	k := &keepaliveStream{done: make(chan struct{})}
	go func() {
		defer close(k.done)
		c := antClient(base, key, spec)
		s := c.Messages.NewStreaming(ctx, bashParams("clean the build"))
		defer s.Close()
		var m anthropic.Message
		text := false
		for s.Next() {
			ev := s.Current()
			if err := m.Accumulate(ev); err != nil {
				k.err = err
				return
			}
			switch {
			case ev.Type == "content_block_start" && ev.ContentBlock.Type == "tool_use":
				k.tool.Store(true)
			case ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta":
				text = true
			case ev.Type == "message_delta" && ev.Delta.StopReason == "" && text && !k.tool.Load():
				k.alive.Add(1)
			}
		}
		k.err, k.final = s.Err(), m
	}()
	return k
}

func keepaliveResponses(ctx context.Context, base, key, spec string) *keepaliveStream {
	k := &keepaliveStream{done: make(chan struct{})}
	go func() {
		defer close(k.done)
		c := oaiClient(base, key, spec)
		s := c.Responses.NewStreaming(ctx, bashResponsesParams())
		defer s.Close()
		var final responses.Response
		text := false
		for s.Next() {
			ev := s.Current()
			switch ev.Type {
			case "response.output_text.delta":
				text = true
			case "response.output_item.added":
				if ev.Item.Type == "function_call" {
					k.tool.Store(true)
				}
			case "response.in_progress":
				if text && !k.tool.Load() {
					k.alive.Add(1)
				}
			case "response.completed":
				final = ev.Response
			}
		}
		k.err, k.final = s.Err(), final
	}()
	return k
}

// TestHeldStreamKeepaliveSeenBySDK: while a call is held, the official
// SDKs hand the application a keepalive event every approvals.keepalive
// (pings and SSE comments they would drop, and agents' idle watchdogs
// would never see), and the reply they accumulate is still exactly the
// provider's once the call is approved.
func TestHeldStreamKeepaliveSeenBySDK(t *testing.T) {
	cases := []struct {
		name      string
		read      func(ctx context.Context, base, key, spec string) *keepaliveStream
		twin, via string // URLs after the mock's and gatekeeper's base
		twinKey   string
	}{
		{"anthropic", keepaliveAnthropic, "", "/t/esc-alive/anthropic", antKey},
		{"responses", keepaliveResponses, "/v1", "/t/esc-alive/openai/v1", oaiKey},
	}
	spec := bashTurn("rm -rf ./build")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOpts{limits: gatesYAML("", "")})
			direct := tc.read(ctxT(t), e.twinURL+tc.twin, tc.twinKey, spec)
			want := direct.wait(t)
			if n := direct.alive.Load(); n != 0 {
				t.Fatalf("the provider's own stream has %d keepalive-like events; the test cannot tell them apart", n)
			}

			s := tc.read(ctxT(t), e.gk+tc.via, vkA, spec)
			r := e.pending(t, "esc-alive", 1)[0]
			waitFor(t, "three keepalives the SDK yields", func() bool { return s.alive.Load() >= 3 })
			if s.tool.Load() {
				t.Fatal("the held call reached the client before approval")
			}
			if _, err := e.vote(t, r.ID, "carol", []string{"secops"}, true); err != nil {
				t.Fatal(err)
			}
			if a, b := mustJSON(t, want), mustJSON(t, s.wait(t)); a != b {
				t.Fatalf("the reply accumulated through keepalives differs from the provider's:\ndirect %s\nvia    %s", a, b)
			}
			if !s.tool.Load() {
				t.Fatal("the approved call was not delivered")
			}
		})
	}
}
