package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"gatekeeper/internal/redistest"
	"gatekeeper/meter"
	"gatekeeper/mockprovider"
)

// processEnv, set in a child's environment, makes the test binary run
// gatekeeper itself: the replica tests start real gatekeeper processes.
const processEnv = "GATEKEEPER_TEST_PROCESS"

// noFileEnv, set in a child's environment, is the open-file limit it runs
// under.
const noFileEnv = "GATEKEEPER_TEST_NOFILE"

func TestMain(m *testing.M) {
	if os.Getenv(processEnv) == "serve" {
		if v := os.Getenv(noFileEnv); v != "" {
			// The child's own open-file limit, soft and hard, as an
			// operator's ulimit -n would set it.
			n, err := strconv.ParseUint(v, 10, 64)
			if err == nil {
				err = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n})
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "setting the open-file limit:", err)
				os.Exit(1)
			}
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// replica is one gatekeeper process.
type replica struct {
	cmd  *exec.Cmd
	base string
	logs *syncBuffer
}

// startReplica starts gatekeeper serve as a child process on a free
// loopback port, with env added to its environment, and stops it, by its
// PID, when the test ends.
func startReplica(t *testing.T, cfg string, env ...string) *replica {
	t.Helper()
	r := &replica{logs: &syncBuffer{}}
	r.cmd = exec.Command(os.Args[0], "serve", "-config", cfg)
	r.cmd.Env = append(append(os.Environ(), processEnv+"=serve", "GATEKEEPER_LISTEN=127.0.0.1:0"), env...)
	out, err := r.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	r.cmd.Stdout = r.logs
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrc := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`"gatekeeper listening".*"addr":"([^"]+)"|msg="gatekeeper listening" addr=(\S+)`)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			r.logs.Write([]byte(line + "\n"))
			if m := re.FindStringSubmatch(line); m != nil && !sent {
				addrc <- m[1] + m[2]
				sent = true
			}
		}
	}()
	t.Cleanup(func() {
		_ = r.cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- r.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = r.cmd.Process.Kill()
			<-done
		}
	})
	select {
	case addr := <-addrc:
		r.base = "http://" + addr
	case <-time.After(20 * time.Second):
		t.Fatalf("gatekeeper process did not start:\n%s", r.logs)
	}
	return r
}

const (
	replicaKey   = "vk-replica-test-0001"
	replicaAdmin = "replica-admin-token-0001"
	costlyModel  = "claude-costly-1"
)

// TestReplicasShareOneBudget runs two gatekeeper processes on one Redis
// and 20 parallel threads of one trajectory calling through both: the
// run's spend never passes its dollar ceiling, and the run halts. It runs
// on one Redis and on a cluster.
func TestReplicasShareOneBudget(t *testing.T) {
	redistest.Each(t, testReplicasShareOneBudget)
}

// storeYAML is the config's store section for r. Its store.timeout is
// past the default: these tests race many writers on one tree, whose
// admissions retry their compare-and-set many times, on a machine the whole
// suite shares; the default 2 s turned some into 503s there.
func storeYAML(r redistest.Target) string {
	return fmt.Sprintf("{kind: redis, redis_url: %q, redis_cluster: %t, timeout: 10s}", r.URL, r.Cluster)
}

func testReplicasShareOneBudget(t *testing.T, r redistest.Target) {
	mock := httptest.NewServer(mockprovider.New(mockprovider.Options{}))
	defer mock.Close()
	const ceiling = 20.0
	cfgText := fmt.Sprintf(`
listen: 127.0.0.1:0
store: %s
providers:
  - {name: anthropic, api: anthropic, base_url: %q, default: true, keys: [{name: k, key: sk-upstream-0001}]}
prices:
  %s: {input: 100, cached_input: 10, cache_write: 125, output: 10000}
tenants:
  - name: fleet
    keys: [%s]
    budget: {dollars: %v}
admin:
  tokens: [{name: ops, token: %s, roles: [operator]}]
log: {level: info, format: json}
`, storeYAML(r), mock.URL, costlyModel, replicaKey, ceiling, replicaAdmin)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	reps := []*replica{startReplica(t, cfg), startReplica(t, cfg)}

	params := anthropic.MessageNewParams{
		Model: costlyModel, MaxTokens: 200,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("summarize the logs"))},
	}
	body, _ := json.Marshal(params)
	table, err := meter.DefaultTable().With(map[string]meter.Price{costlyModel: {Input: 100, CachedInput: 10, CacheWrite: 125, Output: 10000}})
	if err != nil {
		t.Fatal(err)
	}
	// The largest reservation of one call, with room for the SDK's
	// encoding differing from ours.
	slack := meter.ToDollars(table.Estimate(costlyModel, int64(len(body))+512, 200).Micros)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root := func(base string) (spend float64, state, exit string) {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/admin/v1/trajectories/run-par", nil)
		req.Header.Set("Authorization", "Bearer "+replicaAdmin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", ""
		}
		defer resp.Body.Close()
		var rec struct {
			State      string  `json:"state"`
			ExitReason *string `json:"exit_reason"`
			Spend      struct {
				Dollars float64 `json:"dollars"`
			} `json:"spend"`
		}
		b, _ := io.ReadAll(resp.Body)
		if json.Unmarshal(b, &rec) != nil {
			return 0, "", ""
		}
		if rec.ExitReason != nil {
			exit = *rec.ExitReason
		}
		return rec.Spend.Dollars, rec.State, exit
	}

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		halted   = map[int]bool{}
		served   int
		failures []string
	)
	stopWatch := make(chan struct{})
	var maxSeen float64
	watchDone := make(chan struct{})
	go func() {
		// Sample the run's spend while the threads run.
		defer close(watchDone)
		for i := 0; i < 6000; i++ {
			select {
			case <-stopWatch:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if s, _, _ := root(reps[i%2].base); s > maxSeen {
				maxSeen = s
			}
		}
	}()
	for th := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for call := range 200 {
				c := anthropic.NewClient(option.WithBaseURL(reps[(th+call)%2].base), option.WithAPIKey(replicaKey),
					option.WithMaxRetries(0), option.WithHeader("X-Gatekeeper-Trajectory", "run-par"),
					option.WithHeader("X-Claude-Code-Agent-Id", fmt.Sprintf("agent-%02d", th)),
					option.WithHeader("X-Mock-Turn", `{"kind":"text","text":"The logs show three restarts and one failed health check."}`))
				_, err := c.Messages.New(ctx, params)
				var ae *anthropic.Error
				switch {
				case err == nil:
					mu.Lock()
					served++
					mu.Unlock()
					continue
				case errors.As(err, &ae) && ae.StatusCode == http.StatusPaymentRequired:
					mu.Lock()
					halted[th] = true
					mu.Unlock()
				default:
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
				}
				return
			}
		}()
	}
	wg.Wait()
	close(stopWatch)
	<-watchDone

	if len(failures) > 0 {
		t.Fatalf("%d calls failed otherwise than budget_exceeded, first: %s", len(failures), failures[0])
	}
	if len(halted) != 20 {
		t.Errorf("%d of 20 threads were halted", len(halted))
	}
	spend, state, exit := root(reps[0].base)
	t.Logf("%d calls served; spend $%.4f of $%.0f (max sampled $%.4f, one reservation $%.4f)", served, spend, ceiling, maxSeen, slack)
	if spend > ceiling || maxSeen > ceiling {
		// Each call's output limit is clamped to what the run has left,
		// the other calls in flight counted: the ceiling is never passed.
		t.Errorf("spend $%.4f (max sampled $%.4f) passed the ceiling $%.0f", spend, maxSeen, ceiling)
	}
	if spend < ceiling*0.5 {
		t.Errorf("spend $%.4f: the run halted long before its ceiling", spend)
	}
	if state != "FAILED" || exit != "BUDGET_EXCEEDED" {
		t.Errorf("root %s %s, want FAILED BUDGET_EXCEEDED", state, exit)
	}
}

// TestReplicasCancelAcross cancels, through one gatekeeper process, a run
// whose destructive tool call is streaming through another: the agent's
// SDK reports the cancel and never sees the call, and the provider sees
// its connection closed. It runs on one Redis and on a cluster.
func TestReplicasCancelAcross(t *testing.T) {
	redistest.Each(t, testReplicasCancelAcross)
}

func testReplicasCancelAcross(t *testing.T, r redistest.Target) {
	mp := mockprovider.New(mockprovider.Options{})
	mock := httptest.NewServer(mp)
	defer mock.Close()
	cfgText := fmt.Sprintf(`
listen: 127.0.0.1:0
store: %s
providers:
  - {name: anthropic, api: anthropic, base_url: %q, default: true, keys: [{name: k, key: sk-upstream-0001}]}
tenants:
  - {name: fleet, keys: [%s]}
admin:
  tokens: [{name: ops, token: %s, roles: [operator]}]
log: {level: info, format: json}
`, storeYAML(r), mock.URL, replicaKey, replicaAdmin)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	a, b := startReplica(t, cfg), startReplica(t, cfg)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := `{"kind":"tool","text":"Cleaning up.","event_delay":"30ms","tools":[{"name":"Bash","input":{"command":"rm -rf /srv/data/` +
		strings.Repeat("old-artifacts/", 60) + `"}}]}`
	c := anthropic.NewClient(option.WithBaseURL(a.base+"/t/across/anthropic"), option.WithAPIKey(replicaKey),
		option.WithMaxRetries(0), option.WithHeader("X-Mock-Turn", spec))
	s := c.Messages.NewStreaming(ctx, anthropic.MessageNewParams{
		Model: "claude-sonnet-4-5", MaxTokens: 1024,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("clean the build"))},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "Bash", InputSchema: anthropic.ToolInputSchemaParam{
			Properties: map[string]any{"command": map[string]any{"type": "string"}}}}}},
	})
	defer s.Close()
	if !s.Next() { // the stream has begun
		t.Fatalf("no first event: %v", s.Err())
	}
	var m anthropic.Message
	if err := m.Accumulate(s.Current()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond) // into the tool call
	req, _ := http.NewRequestWithContext(ctx, "POST", b.base+"/admin/v1/trajectories/across/cancel", nil)
	req.Header.Set("Authorization", "Bearer "+replicaAdmin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel through the other replica: %d", resp.StatusCode)
	}
	for s.Next() {
		if err := m.Accumulate(s.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "trajectory_canceled") {
		t.Errorf("SDK error %v, want trajectory_canceled", err)
	}
	for _, blk := range m.Content {
		if blk.Type == "tool_use" {
			t.Errorf("the agent received a tool call")
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		reqs := mp.Requests()
		if len(reqs) == 1 && (reqs[0].Canceled || reqs[0].Aborted) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the provider did not see its call aborted: %+v", reqs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var rec struct {
		State      string  `json:"state"`
		ExitReason *string `json:"exit_reason"`
		Spend      struct {
			Estimated bool `json:"estimated"`
		} `json:"spend"`
	}
	for i := 0; i < 500 && rec.State != "CANCELED"; i++ {
		req, _ := http.NewRequestWithContext(ctx, "GET", a.base+"/admin/v1/trajectories/across", nil)
		req.Header.Set("Authorization", "Bearer "+replicaAdmin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = json.NewDecoder(resp.Body).Decode(&rec)
		resp.Body.Close()
		time.Sleep(10 * time.Millisecond)
	}
	if rec.State != "CANCELED" || !rec.Spend.Estimated {
		t.Errorf("record %+v, want CANCELED with an estimated charge", rec)
	}
}
