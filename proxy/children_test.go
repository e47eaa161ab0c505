package proxy_test

import (
	"fmt"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"

	"gatekeeper/trajectory"
)

// TestMaxChildrenShareLastChild: a run's subagents get a child record
// each up to limits.max_children; further ones share the last child, with
// a children_full warning on the run, and are still served and charged.
func TestMaxChildrenShareLastChild(t *testing.T) {
	e := newEnv(t, envOpts{limits: "limits: {max_children: 3}"})
	call := func(agent string) {
		t.Helper()
		c := anthropic.NewClient(aoption.WithBaseURL(e.gk), aoption.WithAPIKey(vkA), aoption.WithMaxRetries(0),
			aoption.WithHeader("X-Gatekeeper-Trajectory", "wide"), aoption.WithHeader("X-Claude-Code-Agent-Id", agent),
			aoption.WithHeader("X-Mock-Turn", `{"kind":"text","text":"done"}`))
		if _, err := c.Messages.New(ctxT(t), anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("task " + agent))}}); err != nil {
			t.Fatalf("agent %s: %v", agent, err)
		}
	}
	for i := range 8 {
		call(fmt.Sprintf("agent-%d", i))
	}
	// Again: each thread finds its record (its hint, or the shared one).
	for i := range 8 {
		call(fmt.Sprintf("agent-%d", i))
	}
	root := e.record(t, "wide")
	// The first agent is the run's own thread; three more get children.
	if len(root.Children) != 3 {
		t.Fatalf("children %v, want 3", root.Children)
	}
	last := e.record(t, root.Children[2])
	var turns int64
	for _, id := range root.Children {
		turns += e.record(t, id).Turns
	}
	if root.Turns+turns != 16 || last.Turns != 10 || root.Spend.Turns != 16 {
		t.Errorf("turns: run %d, children %d (last %d), run's spend %d; want 16 in all, 10 on the shared child",
			root.Turns, turns, last.Turns, root.Spend.Turns)
	}
	warns := e.eventsOf(t, "wide", trajectory.EventChildrenFull)
	if len(warns) != 4 || warns[0]["shares"] != last.ID || warns[0]["max_children"] != float64(3) {
		t.Errorf("children_full events %v, want one for each of the 4 threads past the limit", warns)
	}
}
