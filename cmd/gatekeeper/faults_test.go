package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/internal/redistest"
	"gatekeeper/mockprovider"
)

// The fault suite: two gatekeeper processes on one real redis-server
// (appendonly, fsync always) in front of the mock provider, a load client
// that records what each turn saw, a fault in the middle of the load, and
// a checker that compares what the clients saw with the records the admin
// API returns. RELIABILITY.md holds the table these experiments print.

// faultBeat is the replicas' store.heartbeat: a silent call is swept
// after three beats.
const faultBeat = time.Second

// faultExperiment is one fault under load.
type faultExperiment struct {
	name string
	// grace is the replicas' shutdown_grace ("" for the default).
	grace string
	// spec is the mock's reply for turn i (X-Mock-Turn); stream says
	// whether the turn streams.
	spec   func(i int) (spec string, stream bool)
	turns  int // turns the load sends, at most
	conc   int // turns in flight at once
	onlyA  bool
	pace   time.Duration                   // a client's pause between its turns
	inject func(t *testing.T, r *faultRig) // runs while the load runs; returns when the fault has ended
	// check adds the experiment's own checks of what the clients saw.
	check func(t *testing.T, r *faultRig, seen []turnSeen)
	// relayA puts replica 0 behind a relay to Redis the experiment can
	// pause (faultRig.relay): that replica alone is cut off.
	relayA bool
	// sweptOutput checks that the calls swept or reclaimed were charged
	// the output their clients received, within 10%.
	sweptOutput bool
	// afterFault counts only the turns sent once the fault ended (the
	// fault loses the records of the turns before).
	afterFault bool
	// gated holds every Bash call for approval (approverToken votes).
	gated bool
}

// turnSeen is what the load client saw of one turn.
type turnSeen struct {
	traj     string
	status   int  // 0: no HTTP answer (connection refused or reset before the headers)
	complete bool // the reply's terminal event (or a whole JSON body) arrived
	errEvent bool // the stream carried the provider's error event
	toolUse  bool // the reply delivered a tool_use block
	sent     time.Time
	ended    time.Time
	answered time.Duration // from sending to the status line
	body     string        // a non-200 answer's body
	text     int64         // the bytes of text the stream delivered
}

// faultRig is one experiment's processes.
type faultRig struct {
	redis *redistest.Server
	relay *relay // replica 0's way to Redis, with relayA
	cfg   string
	cfgs  [2]string // each replica's config: cfg, or with relayA replica 0's through the relay
	mu    sync.Mutex
	reps  [2]*replica
	all   []*replica // every replica started, restarts included
	envs  [2][]string
	// streaming counts the streams whose first event has arrived.
	streaming atomic.Int64
}

func (r *faultRig) replica(i int) *replica {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reps[i]
}

// statesOf calls fn with the state of each trajectory the turns used, as
// the replica still up reports it.
func (r *faultRig) statesOf(t *testing.T, seen []turnSeen, fn func(id, state string)) {
	t.Helper()
	done := map[string]bool{}
	for _, s := range seen {
		if done[s.traj] {
			continue
		}
		done[s.traj] = true
		var rec faultRecord
		if code := adminCall(context.Background(), t, "GET", r.replica(1).base+"/admin/v1/trajectories/"+s.traj, replicaAdmin, &rec); code != 200 {
			t.Errorf("%s: admin API %d", s.traj, code)
			continue
		}
		fn(s.traj, rec.State)
	}
}

// restart starts replica i again under the same name.
func (r *faultRig) restart(t *testing.T, i int) {
	rep := startReplica(t, r.cfgs[i], r.envs[i]...)
	r.mu.Lock()
	r.reps[i] = rep
	r.all = append(r.all, rep)
	r.mu.Unlock()
}

// replaceAll starts one replica under a new name and sends every later
// turn (and admin read) to it.
func (r *faultRig) replaceAll(t *testing.T, name string) {
	rep := startReplica(t, r.cfgs[1], "GATEKEEPER_REPLICA="+name)
	r.mu.Lock()
	r.reps = [2]*replica{rep, rep}
	r.all = append(r.all, rep)
	r.mu.Unlock()
}

// logs is every replica's log so far, those killed included.
func (r *faultRig) logs() string {
	var b strings.Builder
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rep := range r.all {
		b.WriteString(rep.logs.String())
	}
	return b.String()
}

func TestFaults(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server is not on PATH, and CI is set: %v", err)
		}
		t.Skipf("SKIPPING THE FAULT SUITE: redis-server is not on PATH (%v)", err)
	}
	if testing.Short() {
		t.Skip("SKIPPING THE FAULT SUITE in -short mode")
	}
	text := func(int) (string, bool) { return `{"kind":"text","deltas":6,"event_delay":"15ms"}`, true }
	experiments := []faultExperiment{
		{name: "redis-sigstop-10s", turns: 400, conc: 8, pace: 100 * time.Millisecond, spec: text, inject: func(t *testing.T, r *faultRig) {
			time.Sleep(2 * time.Second)
			if err := r.redis.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Second)
			if err := r.redis.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "redis-sigkill-aof-restart", turns: 400, conc: 8, pace: 100 * time.Millisecond, spec: text, inject: func(t *testing.T, r *faultRig) {
			time.Sleep(2 * time.Second)
			start := time.Now()
			r.redis = r.redis.Restart(t) // returns once the AOF is loaded
			t.Logf("Redis killed, restarted and loaded its AOF in %v", time.Since(start).Round(100*time.Millisecond))
		}},
		{name: "replica-sigkill-restart", turns: 300, conc: 16, pace: 20 * time.Millisecond,
			spec: func(int) (string, bool) { return `{"kind":"text","deltas":20,"event_delay":"40ms"}`, true },
			inject: func(t *testing.T, r *faultRig) {
				time.Sleep(2 * time.Second)
				a := r.replica(0)
				_ = a.cmd.Process.Kill()
				_, _ = a.cmd.Process.Wait()
				time.Sleep(time.Second)
				r.restart(t, 0)
			}},
		{name: "replica-sigkill-mid-stall", turns: 400, conc: 8, pace: 20 * time.Millisecond, sweptOutput: true,
			spec: func(i int) (string, bool) {
				if i%2 == 0 {
					// Replica 0's streams pause mid-reply for longer than the
					// sweeper's bound: the kill finds each past a beat that
					// checkpointed all it had streamed.
					return `{"kind":"text","text":"` + strings.Repeat("a word or two ", 150) + `","deltas":40,"event_delay":"10ms","stall":"20s","stall_at":24}`, true
				}
				return `{"kind":"text","deltas":6,"event_delay":"15ms"}`, true
			},
			inject: func(t *testing.T, r *faultRig) {
				time.Sleep(4 * time.Second)
				a := r.replica(0)
				_ = a.cmd.Process.Kill()
				_, _ = a.cmd.Process.Wait()
			}},
		{name: "replica-cut-off-from-redis-6s", turns: 400, conc: 8, pace: 50 * time.Millisecond, relayA: true,
			spec: func(int) (string, bool) { return `{"kind":"text","deltas":20,"event_delay":"40ms"}`, true },
			inject: func(t *testing.T, r *faultRig) {
				time.Sleep(2 * time.Second)
				r.relay.pause(true)
				time.Sleep(6 * time.Second)
				r.relay.pause(false)
			},
			check: func(t *testing.T, r *faultRig, seen []turnSeen) {
				// The cut-off replica's calls are swept by the other, and
				// their real charges, retried once Redis answers again,
				// replace the estimates: each retried charge is recorded
				// (within the retries' 10 s backoff), none refused.
				var all string
				for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
					all = r.logs()
					if strings.Count(all, `"msg":"store unreachable; retrying the turn's charge"`) ==
						strings.Count(all, `"msg":"turn charge recorded after the store came back"`)+strings.Count(all, `"msg":"charge not recorded`) {
						break
					}
				}
				retried := strings.Count(all, `"msg":"store unreachable; retrying the turn's charge"`)
				recorded := strings.Count(all, `"msg":"turn charge recorded after the store came back"`)
				t.Logf("%d charges retried, %d recorded after the store came back", retried, recorded)
				if retried != recorded || strings.Contains(all, `"msg":"charge not recorded`) {
					t.Errorf("%d charges retried, %d recorded; a charge not recorded: %v", retried, recorded, strings.Contains(all, `"msg":"charge not recorded`))
				}
			}},
		{name: "redis-restart-without-data", turns: 400, conc: 8, pace: 100 * time.Millisecond, spec: text, afterFault: true,
			inject: func(t *testing.T, r *faultRig) {
				time.Sleep(2 * time.Second)
				// FLUSHALL goes to the AOF too: the restart loads nothing.
				r.redis.Flush(t)
				r.redis = r.redis.Restart(t)
			},
			check: func(t *testing.T, r *faultRig, seen []turnSeen) {
				// A write retried onto a record the restart lost says so;
				// no line promises a sweep of a record that is gone.
				if all := r.logs(); strings.Contains(all, "the sweeper reclaims it") {
					t.Errorf("a log line promises a sweep after the records were lost: %s", lineWith(all, "the sweeper reclaims it"))
				}
			}},
		{name: "both-replicas-sigkill-one-back-renamed", turns: 300, conc: 8, pace: 200 * time.Millisecond, sweptOutput: true,
			spec: func(i int) (string, bool) {
				if i < 8 {
					// The first stream of each client pauses mid-reply
					// past a beat that checkpointed what it had streamed:
					// the kill finds each with its output on the record.
					return `{"kind":"text","text":"` + strings.Repeat("a word or two ", 150) + `","deltas":40,"event_delay":"10ms","stall":"20s","stall_at":24}`, true
				}
				return `{"kind":"text","deltas":6,"event_delay":"15ms"}`, true
			},
			inject: func(t *testing.T, r *faultRig) {
				time.Sleep(4 * time.Second)
				for i := range 2 {
					a := r.replica(i)
					_ = a.cmd.Process.Kill()
					_, _ = a.cmd.Process.Wait()
				}
				time.Sleep(time.Second)
				// Neither name comes back: the calls of both are swept by
				// a replica that never owned them.
				r.replaceAll(t, "both-replicas-sigkill-one-back-renamed-new")
			}},
		{name: "slow-store-during-holds", turns: 300, conc: 6, pace: 100 * time.Millisecond, gated: true,
			spec: func(int) (string, bool) {
				return `{"kind":"tool","text":"Cleaning up.","tools":[{"name":"Bash","input":{"command":"rm -rf /tmp/scratch"}}]}`, true
			},
			inject: func(t *testing.T, r *faultRig) {
				// An approver approves every pending call for as long as
				// the experiment runs; meanwhile Redis answers slowly for
				// 6 s, each stall shorter than store.timeout.
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				t.Cleanup(cancel)
				go approveAll(ctx, r)
				time.Sleep(2 * time.Second)
				c := goredis.NewClient(&goredis.Options{Addr: r.redis.Addr, Password: r.redis.Password})
				defer c.Close()
				for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
					if err := c.Do(ctx, "DEBUG", "SLEEP", "0.5").Err(); err != nil {
						t.Errorf("DEBUG SLEEP: %v", err)
						return
					}
				}
			},
			check: func(t *testing.T, r *faultRig, seen []turnSeen) {
				for _, s := range seen {
					switch {
					case s.status == 200 && (!s.complete || !s.toolUse):
						t.Errorf("%s: an approved call's stream: complete %v tool_use %v", s.traj, s.complete, s.toolUse)
					case s.status != 200 && s.status != 503:
						t.Errorf("%s: status %d: %s", s.traj, s.status, s.body)
					case strings.Contains(s.body, "no longer held") || strings.Contains(s.body, "could not hold"):
						t.Errorf("%s: a false message: %s", s.traj, s.body)
					}
				}
			}},
		{name: "sigterm-past-grace", turns: 10, conc: 10, onlyA: true, grace: "1s",
			spec: func(int) (string, bool) { return `{"kind":"text","deltas":60,"event_delay":"100ms"}`, true },
			inject: func(t *testing.T, r *faultRig) {
				// Every stream is under way before the signal, however
				// slowly a loaded machine starts them: the experiment is
				// about streams that outlive the grace, not turns refused
				// at the door.
				for end := time.Now().Add(20 * time.Second); r.streaming.Load() < 10 && time.Now().Before(end); {
					time.Sleep(20 * time.Millisecond)
				}
				if n := r.streaming.Load(); n < 10 {
					t.Errorf("only %d of 10 streams began within 20s", n)
				}
				a := r.replica(0)
				_ = a.cmd.Process.Signal(syscall.SIGTERM)
				done := make(chan struct{})
				go func() { _, _ = a.cmd.Process.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(30 * time.Second):
					t.Errorf("gatekeeper still running 30s after SIGTERM with a 1s grace")
				}
			},
			check: func(t *testing.T, r *faultRig, seen []turnSeen) {
				for _, s := range seen {
					if s.status != 200 || s.complete || !s.errEvent {
						t.Errorf("a stream past the grace: status %d complete %v error event %v; want 200 ended with the error event", s.status, s.complete, s.errEvent)
					}
				}
				r.statesOf(t, seen, func(id, state string) {
					if state != "READY" {
						t.Errorf("%s is %s after its call was ended by the shutdown; want READY (the run goes on)", id, state)
					}
				})
			}},
		{name: "provider-resets-errors-529-500", turns: 300, conc: 8,
			spec: func(i int) (string, bool) {
				switch i % 5 {
				case 1:
					return `{"kind":"error_midstream","deltas":4}`, true
				case 2:
					return `{"kind":"disconnect"}`, true
				case 3:
					return `{"kind":"http_error","status":529}`, true
				case 4:
					return `{"kind":"http_error","status":500}`, i%2 == 0
				}
				return `{"kind":"text","deltas":4}`, i%2 == 0
			}},
		{name: "non-streamed-max-tokens-in-tool-call", turns: 60, conc: 6,
			spec: func(int) (string, bool) {
				return `{"kind":"max_tokens","cut_in_tool":true,"tools":[{"name":"Bash","input":{"command":"ls -la /tmp"}}]}`, false
			},
			check: func(t *testing.T, r *faultRig, seen []turnSeen) {
				for _, s := range seen {
					if s.toolUse {
						t.Errorf("a tool call cut at max_tokens was delivered")
					}
				}
				r.statesOf(t, seen, func(id, state string) {
					if state == "WAITING_TOOL" {
						t.Errorf("%s waits for the result of a tool call it never delivered", id)
					}
				})
			}},
	}
	var rowsMu sync.Mutex
	var rows []string
	t.Cleanup(func() {
		sort.Strings(rows)
		t.Logf("\n| experiment | turns | 200s | errors by status | lost | doubled | stuck | recovery | swept output, charged of streamed (tokens) | slowest 503 (store.timeout 2s) |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n%s", strings.Join(rows, "\n"))
	})
	for _, x := range experiments {
		t.Run(x.name, func(t *testing.T) {
			t.Parallel()
			row := runFaultExperiment(t, x)
			rowsMu.Lock()
			rows = append(rows, row)
			rowsMu.Unlock()
		})
	}
}

// runFaultExperiment runs x and returns its table row.
func runFaultExperiment(t *testing.T, x faultExperiment) string {
	srv := redistest.StartServer(t, "--appendonly", "yes", "--appendfsync", "always", "--enable-debug-command", "local")
	if x.name == "redis-sigkill-aof-restart" {
		fillJunk(t, srv)
	}
	mock := httptest.NewServer(mockprovider.New(mockprovider.Options{}))
	t.Cleanup(mock.Close)
	grace := ""
	if x.grace != "" {
		grace = "shutdown_grace: " + x.grace
	}
	cfgText := fmt.Sprintf(`
listen: 127.0.0.1:0
%s
store: {kind: redis, redis_url: %q, timeout: 2s, heartbeat: %s}
providers:
  - {name: anthropic, api: anthropic, base_url: %q, default: true, keys: [{name: k, key: sk-upstream-0001}]}
tenants:
  - name: fleet
    keys: [%s]
    max_truncations: -1
admin:
  tokens: [{name: ops, token: %s, roles: [operator]}, {name: carol, token: %s, roles: ["approver:secops"]}]
log: {level: info, format: json}
`, grace, srv.URL, faultBeat, mock.URL, replicaKey, replicaAdmin, approverToken)
	if x.gated {
		cfgText += `
gates:
  - name: shell
    when: 'tool.name == "Bash"'
    approvers: {roles: [secops], quorum: 1}
approvals:
  keepalive: 50ms
`
	}
	r := &faultRig{redis: srv, cfg: filepath.Join(t.TempDir(), "config.yaml")}
	if err := os.WriteFile(r.cfg, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	r.cfgs = [2]string{r.cfg, r.cfg}
	if x.relayA {
		r.relay = startRelay(t, srv.Addr)
		r.cfgs[0] = filepath.Join(t.TempDir(), "config-relayed.yaml")
		relayed := strings.Replace(cfgText, srv.URL, "redis://"+r.relay.addr(), 1)
		if err := os.WriteFile(r.cfgs[0], []byte(relayed), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for i := range r.reps {
		r.envs[i] = []string{fmt.Sprintf("GATEKEEPER_REPLICA=%s-%d", x.name, i)}
		r.reps[i] = startReplica(t, r.cfgs[i], r.envs[i]...)
		r.all = append(r.all, r.reps[i])
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var (
		mu      sync.Mutex
		seen    []turnSeen
		next    int
		stopped bool
		wg      sync.WaitGroup
	)
	faultEnded := make(chan time.Time, 1)
	var endedAt atomicTime
	go func() {
		if x.inject != nil {
			x.inject(t, r)
		}
		now := time.Now()
		endedAt.set(now)
		faultEnded <- now
	}()
	trajs := max(x.conc, 1)
	for w := range x.conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			traj := fmt.Sprintf("%s-%d", x.name, w%trajs)
			for {
				mu.Lock()
				i := next
				next++
				// A fault's load runs on past its end, to see the recovery.
				over := x.inject != nil && endedAt.since() > afterFault
				if stopped || i >= x.turns || over || ctx.Err() != nil {
					mu.Unlock()
					return
				}
				mu.Unlock()
				rep := r.replica(i % 2)
				if x.onlyA {
					rep = r.replica(0)
				}
				spec, stream := x.spec(i)
				s := sendTurn(ctx, rep.base, traj, i, spec, stream, &r.streaming)
				mu.Lock()
				seen = append(seen, s)
				mu.Unlock()
				time.Sleep(x.pace)
			}
		}()
	}
	wg.Wait()
	ended := <-faultEnded
	mu.Lock()
	stopped = true
	mu.Unlock()

	// Recovery: from the fault's end to the first 200 that started after it.
	recovery := "—"
	if x.inject != nil {
		first := time.Time{}
		for _, s := range seen {
			if s.status == 200 && s.ended.After(ended) && (first.IsZero() || s.ended.Before(first)) {
				first = s.ended
			}
		}
		if !first.IsZero() {
			recovery = first.Sub(ended).Round(100 * time.Millisecond).String()
		}
	}
	var slowest503 time.Duration
	for _, s := range seen {
		if s.status == 503 {
			slowest503 = max(slowest503, s.answered)
		}
	}
	slow := "—"
	if slowest503 > 0 {
		slow = slowest503.Round(time.Millisecond).String()
		t.Logf("%s: the slowest 503 took %v (store.timeout 2s)", x.name, slow)
	}
	if x.check != nil {
		x.check(t, r, seen)
	}
	checked := seen
	var earlier map[string]int
	if x.afterFault {
		// A turn answered 200 before the fault's end may or may not be on
		// the records the fault left: sent while the store was down, or
		// settled late onto a run started again after the restart. Such a
		// turn is never counted lost, and counts in the bound on charges
		// (no turn charged twice).
		checked, earlier = nil, map[string]int{}
		for _, s := range seen {
			switch {
			case s.sent.After(ended):
				checked = append(checked, s)
			case s.status == 200:
				earlier[s.traj]++
			}
		}
		t.Logf("%s: %d of %d turns sent after the fault are checked", x.name, len(checked), len(seen))
	}
	row := checkCharges(t, ctx, r, x.name, checked, earlier, recovery)
	swept := "—"
	if x.sweptOutput {
		swept = checkSweptOutput(t, ctx, r, seen)
	}
	return row + " " + swept + " | " + slow + " |"
}

// checkSweptOutput compares, per trajectory, the output charged to the
// calls taken for lost (the turn events charged as estimated with a
// "call lost" detail) with the output their clients received, the cut
// 200s, estimated from their text as gatekeeper estimates it (a token
// per 4 bytes): within 10%. It returns the figures for the table.
func checkSweptOutput(t *testing.T, ctx context.Context, r *faultRig, seen []turnSeen) string {
	t.Helper()
	streamed := map[string]int64{}
	for _, s := range seen {
		if s.status == 200 && !s.complete {
			streamed[s.traj] += (s.text + 3) / 4
		}
	}
	base := r.replica(1).base
	var totalCharged, totalStreamed int64
	for traj, want := range streamed {
		var root faultRecord
		if code := adminCall(ctx, t, "GET", base+"/admin/v1/trajectories/"+traj, replicaAdmin, &root); code != 200 {
			t.Errorf("%s: admin API %d", traj, code)
			continue
		}
		var charged int64
		for _, id := range append([]string{root.ID}, root.Children...) {
			var page struct {
				Events []struct {
					Type string `json:"type"`
					Data struct {
						Estimated bool   `json:"estimated"`
						Detail    string `json:"detail"`
						Usage     struct {
							OutputTokens int64 `json:"output_tokens"`
						} `json:"usage"`
					} `json:"data"`
				} `json:"events"`
			}
			if code := adminCall(ctx, t, "GET", base+"/admin/v1/trajectories/"+id+"/events?limit=1000", replicaAdmin, &page); code != 200 {
				t.Errorf("%s events: admin API %d", id, code)
				continue
			}
			for _, ev := range page.Events {
				if ev.Type == "turn" && ev.Data.Estimated && strings.HasPrefix(ev.Data.Detail, "call lost") {
					charged += ev.Data.Usage.OutputTokens
				}
			}
		}
		totalCharged += charged
		totalStreamed += want
		if d := charged - want; d*10 > want || -d*10 > want {
			t.Errorf("%s: the calls taken for lost were charged %d output tokens; their clients received %d", traj, charged, want)
		}
	}
	if totalStreamed == 0 {
		t.Errorf("no cut stream delivered any text: the experiment measured nothing")
	}
	return fmt.Sprintf("%d of %d", totalCharged, totalStreamed)
}

// fillJunk loads Redis with enough keys that loading them at a restart
// takes seconds, and rewrites the AOF so they are in it.
func fillJunk(t *testing.T, srv *redistest.Server) {
	t.Helper()
	// POPULATE and the rewrite take seconds, more on a loaded machine: each
	// command is bounded by the minute's context, not by the client's
	// default 3 s read timeout.
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr, MaxRetries: -1, ReadTimeout: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Do(ctx, "DEBUG", "POPULATE", 1500000, "junk", 64).Err(); err != nil {
		t.Fatalf("DEBUG POPULATE: %v", err)
	}
	if err := c.BgRewriteAOF(ctx).Err(); err != nil {
		t.Fatalf("BGREWRITEAOF: %v", err)
	}
	for range 600 {
		info, err := c.Info(ctx, "persistence").Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, "aof_rewrite_in_progress:0") && !strings.Contains(info, "aof_rewrite_scheduled:1") {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("the AOF rewrite did not finish in a minute")
}

// sendTurn sends one turn of trajectory traj through base and reads its
// whole answer; a stream counts itself in streaming once its first event
// has arrived.
func sendTurn(ctx context.Context, base, traj string, i int, spec string, stream bool, streaming *atomic.Int64) (s turnSeen) {
	s.traj = traj
	defer func() { s.ended = time.Now() }()
	// Each turn's words differ: a turn with the same words as a held one
	// would be its retry.
	body := fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":256,"stream":%t,"messages":[{"role":"user","content":"work on %s, step %d"}]}`, stream, traj, i)
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/t/"+traj+"/anthropic/v1/messages", strings.NewReader(body))
	if err != nil {
		return s
	}
	req.Header.Set("x-api-key", replicaKey)
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("content-type", "application/json")
	req.Header.Set("X-Mock-Turn", spec)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sent := time.Now()
	s.sent = sent
	resp, err := http.DefaultClient.Do(req.WithContext(cctx))
	if err != nil {
		return s
	}
	defer resp.Body.Close()
	s.status, s.answered = resp.StatusCode, time.Since(sent)
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		s.body = string(b)
		return s
	}
	if !stream {
		var msg struct {
			StopReason string `json:"stop_reason"`
			Content    []struct {
				Type string `json:"type"`
			} `json:"content"`
		}
		b, err := io.ReadAll(resp.Body)
		s.complete = err == nil && json.Unmarshal(b, &msg) == nil && msg.StopReason != ""
		for _, c := range msg.Content {
			s.toolUse = s.toolUse || c.Type == "tool_use"
		}
		return s
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	first := true
	for sc.Scan() {
		line := sc.Text()
		if first && strings.HasPrefix(line, "data: ") {
			first = false
			streaming.Add(1)
		}
		switch {
		case line == "event: message_stop":
			s.complete = true
		case line == "event: error":
			s.errEvent = true
		case strings.HasPrefix(line, "data: ") && strings.Contains(line, `"type":"tool_use"`):
			s.toolUse = true
		case strings.HasPrefix(line, "data: ") && strings.Contains(line, `"text_delta"`):
			var ev struct {
				Delta struct {
					Text string `json:"text"`
				} `json:"delta"`
			}
			if json.Unmarshal([]byte(line[len("data: "):]), &ev) == nil {
				s.text += int64(len(ev.Delta.Text))
			}
		}
	}
	return s
}

// faultRecord is what the checker reads of a record.
type faultRecord struct {
	ID       string   `json:"id"`
	State    string   `json:"state"`
	Children []string `json:"children"`
	Spend    struct {
		Turns int `json:"turns"`
	} `json:"spend"`
	Reserved struct {
		Calls int `json:"calls"`
	} `json:"reserved"`
}

// checkCharges compares what the clients saw with the records: every 200
// charged, none charged twice, nothing left CALLING_MODEL or reserved once
// the sweeper's bound has passed. It returns the table row.
// earlier counts, by trajectory, the turns answered 200 that seen leaves
// out but the records may carry (afterFault): they bound the charges, and
// none of them is required.
func checkCharges(t *testing.T, ctx context.Context, r *faultRig, name string, seen []turnSeen, earlier map[string]int, recovery string) string {
	t.Helper()
	byTraj := map[string][3]int{} // 200s, no answer, other
	byStatus := map[int]int{}
	n200, cut := 0, 0
	for _, s := range seen {
		if s.status == 200 && !s.complete {
			cut++
		}
		c := byTraj[s.traj]
		switch s.status {
		case 200:
			c[0]++
			n200++
		case 0:
			c[1]++
		default:
			c[2]++
		}
		byTraj[s.traj] = c
		if s.status != 200 {
			byStatus[s.status]++
		}
	}
	// The sweeper's bound, a sweep and a margin: past it nothing may be in
	// flight. The replica that is still up answers.
	base := r.replica(1).base
	deadline := time.Now().Add(config3Beats() + 20*time.Second)
	var lost, doubled, stuck int
	for {
		lost, doubled, stuck = 0, 0, 0
		var problems []string
		for traj, c := range byTraj {
			var root faultRecord
			if code := adminCall(ctx, t, "GET", base+"/admin/v1/trajectories/"+traj, replicaAdmin, &root); code != 200 {
				if c[0] > 0 {
					problems = append(problems, fmt.Sprintf("%s: admin API %d", traj, code))
					lost += c[0]
				}
				continue
			}
			charged := root.Spend.Turns
			if charged < c[0] {
				lost += c[0] - charged
				problems = append(problems, fmt.Sprintf("%s: %d turns answered 200, %d charged", traj, c[0], charged))
			}
			if most := c[0] + c[1] + earlier[traj]; charged > most {
				doubled += charged - most
				problems = append(problems, fmt.Sprintf("%s: %d charged for %d answered 200 and %d unanswered (and %d answered 200 before the fault's end)", traj, charged, c[0], c[1], earlier[traj]))
			}
			if root.Reserved.Calls != 0 {
				stuck++
				problems = append(problems, fmt.Sprintf("%s: %d calls still reserved", traj, root.Reserved.Calls))
			}
			for _, id := range append([]string{root.ID}, root.Children...) {
				rec := root
				if id != root.ID {
					adminCall(ctx, t, "GET", base+"/admin/v1/trajectories/"+id, replicaAdmin, &rec)
				}
				if rec.State == "CALLING_MODEL" {
					stuck++
					problems = append(problems, id+": still CALLING_MODEL")
				}
			}
		}
		if len(problems) == 0 {
			if os.Getenv("FAULT_DUMP_ALL") != "" {
				dumpFault(t, r, name, seen, false)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: after the sweeper's bound:\n%s", name, strings.Join(problems, "\n"))
			dumpFault(t, r, name, seen, true)
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	var statuses []string
	for code, n := range byStatus {
		label := fmt.Sprint(code)
		if code == 0 {
			label = "no answer"
		}
		statuses = append(statuses, fmt.Sprintf("%s: %d", label, n))
	}
	sort.Strings(statuses)
	errs := strings.Join(statuses, ", ")
	if errs == "" {
		errs = "none"
	}
	return fmt.Sprintf("| %s | %d | %d (%d cut) | %s | %d | %d | %d | %s |", name, len(seen), n200, cut, errs, lost, doubled, stuck, recovery)
}

// config3Beats is the sweeper's bound for faultBeat.
func config3Beats() time.Duration { return 3*faultBeat + faultBeat }

// afterFault is how long a fault's load runs on once the fault has ended.
const afterFault = 3 * time.Second

// atomicTime is a time set once by one goroutine and read by others.
type atomicTime struct {
	mu sync.Mutex
	t  time.Time
}

func (a *atomicTime) set(t time.Time) {
	a.mu.Lock()
	a.t = t
	a.mu.Unlock()
}

// since is how long ago the time was set; zero before.
func (a *atomicTime) since() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.t.IsZero() {
		return 0
	}
	return time.Since(a.t)
}

// dumpFault logs, after a failed check, the non-200 answers and the
// replicas' warnings and errors (settles retried, charges not recorded,
// calls swept); with $FAULT_LOGDIR set it also writes every answer and
// the replicas' whole logs there (every run's with $FAULT_DUMP_ALL too).
func dumpFault(t *testing.T, r *faultRig, name string, seen []turnSeen, failed bool) {
	t.Helper()
	r.mu.Lock()
	all := slices.Clone(r.all)
	r.mu.Unlock()
	if failed {
		bodies := map[string]int{}
		for _, s := range seen {
			if s.status != 200 {
				bodies[fmt.Sprintf("%d %s", s.status, s.body)]++
			}
		}
		for b, n := range bodies {
			t.Logf("%d answers: %s", n, b)
		}
		var lines []string
		for i, rep := range all {
			for line := range strings.Lines(rep.logs.String()) {
				if strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) {
					lines = append(lines, fmt.Sprintf("replica %d: %s", i, strings.TrimSpace(line)))
				}
			}
		}
		if len(lines) > 300 {
			lines = lines[len(lines)-300:]
		}
		t.Logf("the replicas' warnings and errors:\n%s", strings.Join(lines, "\n"))
	}
	dir := os.Getenv("FAULT_LOGDIR")
	if dir == "" {
		return
	}
	var b strings.Builder
	for _, s := range seen {
		fmt.Fprintf(&b, "%s %s status=%d complete=%v err=%v answered=%v body=%q\n", s.ended.Format(time.RFC3339Nano), s.traj, s.status, s.complete, s.errEvent, s.answered, s.body)
	}
	stamp := time.Now().Format("150405.000")
	_ = os.WriteFile(filepath.Join(dir, name+"-"+stamp+"-seen.txt"), []byte(b.String()), 0o600)
	for i, rep := range all {
		_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%s-rep%d.log", name, stamp, i)), []byte(rep.logs.String()), 0o600)
	}
	t.Logf("answers and logs written to %s (%s)", dir, stamp)
}

// lineWith is the first line of logs that holds s.
func lineWith(logs, s string) string {
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// approveAll approves, as carol, every pending approval either replica
// lists, until ctx ends.
func approveAll(ctx context.Context, r *faultRig) {
	for ctx.Err() == nil {
		for i := range 2 {
			base := r.replica(i).base
			req, _ := http.NewRequestWithContext(ctx, "GET", base+"/admin/v1/approvals?state=pending", nil)
			req.Header.Set("Authorization", "Bearer "+approverToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				continue
			}
			var list struct {
				Approvals []struct {
					ID string `json:"id"`
				} `json:"approvals"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&list)
			resp.Body.Close()
			for _, a := range list.Approvals {
				req, _ := http.NewRequestWithContext(ctx, "POST", base+"/admin/v1/approvals/"+a.ID+"/approve", nil)
				req.Header.Set("Authorization", "Bearer "+approverToken)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}
