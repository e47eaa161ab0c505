package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestReadmeTour takes README's five-minute tour on the repository's own
// config.yaml, with the request bodies and the mock's turn spec read from
// README itself: a run with a budget of two turns gets 200, 200, then 402
// and ends FAILED; a forced recursive rm is held until approved through
// the CLI, and then delivered.
func TestReadmeTour(t *testing.T) {
	readme := readDoc(t, "README.md")
	_, tour, ok := strings.Cut(readme, "\n## A five-minute tour\n")
	tour, _, _ = strings.Cut(tour, "\n## ")
	bodies := regexp.MustCompile(`(?s)-d '(\{.*?\})'`).FindAllStringSubmatch(tour, -1)
	spec := regexp.MustCompile(`-H 'X-Mock-Turn: (\{.*?\})'`).FindStringSubmatch(tour)
	if !ok || len(bodies) != 3 || spec == nil || !strings.Contains(tour, "$B/t/tour-1/anthropic/v1/messages") {
		t.Fatalf("README's tour changed shape: %d bodies, spec %q", len(bodies), spec)
	}
	create, turn, held := bodies[0][1], bodies[1][1], bodies[2][1]

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-config", "../../config.yaml"}, env("GATEKEEPER_LISTEN", "127.0.0.1:0"), logs, logs)
	}()
	addrRe := regexp.MustCompile(`msg="gatekeeper listening" addr=(\S+)`)
	var addr string
	for i := 0; i < 500 && addr == ""; i++ {
		if m := addrRe.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	if addr == "" {
		t.Fatalf("gatekeeper did not start:\n%s", logs)
	}
	base := "http://" + addr
	client := &http.Client{Timeout: 30 * time.Second}
	post := func(path, body string, header ...string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(body))
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	agent := []string{"x-api-key", "gk-demo-key", "anthropic-version", "2023-06-01", "content-type", "application/json"}
	cli := env("GATEKEEPER_URL", base, "GATEKEEPER_ADMIN_TOKEN", "dev-admin-token-change-me")

	// A budget.
	if code, body := post("/admin/v1/trajectories", create, "Authorization", "Bearer dev-admin-token-change-me"); code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("create: %d %s", code, body)
	}
	var codes []int
	for range 3 {
		code, _ := post("/t/tour-1/anthropic/v1/messages", turn, agent...)
		codes = append(codes, code)
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != http.StatusPaymentRequired {
		t.Fatalf("the tour's three turns answered %v, README says 200, 200, 402", codes)
	}
	var out bytes.Buffer
	var rec struct {
		State      string `json:"state"`
		ExitReason string `json:"exit_reason"`
	}
	if err := run(ctx, []string{"trajectories", "show", "tour-1", "-json"}, cli, &out, &out); err != nil {
		t.Fatalf("trajectories show: %v\n%s", err, out.String())
	}
	if err := json.Unmarshal(out.Bytes(), &rec); err != nil || rec.State != "FAILED" || rec.ExitReason != "BUDGET_EXCEEDED" {
		t.Fatalf("tour-1: %+v %v\n%s", rec, err, out.String())
	}

	// An approval.
	type answer struct {
		code int
		body string
	}
	got := make(chan answer, 1)
	go func() {
		code, body := post("/anthropic/v1/messages", held, append(agent, "X-Mock-Turn", spec[1])...)
		got <- answer{code, body}
	}()
	var id string
	for i := 0; i < 500 && id == ""; i++ {
		out.Reset()
		if err := run(ctx, []string{"approvals", "ls", "-state", "pending", "-json"}, cli, &out, &out); err != nil {
			t.Fatalf("approvals ls: %v\n%s", err, out.String())
		}
		var reqs []struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(out.Bytes(), &reqs); err != nil {
			t.Fatal(err)
		}
		if len(reqs) == 1 {
			id = reqs[0].ID
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if id == "" {
		t.Fatal("the tour's call was not held for approval")
	}
	select {
	case a := <-got:
		t.Fatalf("the held call was answered before its approval: %d %s", a.code, a.body)
	default:
	}
	out.Reset()
	if err := run(ctx, []string{"approvals", "approve", id}, cli, &out, &out); err != nil {
		t.Fatalf("approvals approve: %v\n%s", err, out.String())
	}
	select {
	case a := <-got:
		if a.code != 200 || !strings.Contains(a.body, `"type":"tool_use"`) || !strings.Contains(a.body, "rm -rf /tmp/scratch") {
			t.Fatalf("the approved call: %d %s", a.code, a.body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the approved call was not delivered")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
	}
}
