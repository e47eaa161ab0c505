package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"gatekeeper/internal/redistest"
	"gatekeeper/meter"
	"gatekeeper/mockprovider"
)

// TestReplicasTenantCeiling runs two gatekeeper processes on one Redis
// (and on a cluster) and 20 agents of one tenant that start a new
// trajectory for every call, through both: the tenant's dollars_per_day
// holds across all those runs and both replicas, and the refusal names the
// limit and when it resets. The same processes serve a tenant whose runs
// only operators start.
func TestReplicasTenantCeiling(t *testing.T) {
	redistest.Each(t, testReplicasTenantCeiling)
}

const operatorsKey = "vk-operators-test-0002"

func testReplicasTenantCeiling(t *testing.T, r redistest.Target) {
	mock := httptest.NewServer(mockprovider.New(mockprovider.Options{}))
	defer mock.Close()
	const ceiling = 10.0
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
    limits: {dollars_per_day: %v}
  - name: curated
    keys: [%s]
    trajectories: operators
admin:
  tokens: [{name: ops, token: %s, roles: [operator]}]
log: {level: info, format: json}
`, storeYAML(r), mock.URL, costlyModel, replicaKey, ceiling, operatorsKey, replicaAdmin)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	reps := []*replica{startReplica(t, cfg), startReplica(t, cfg)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

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
	oneCall := meter.ToDollars(table.Estimate(costlyModel, int64(len(body))+512, 200).Micros)

	daySpend := func(base string) float64 {
		var v struct {
			Spend struct {
				Day struct {
					Dollars float64 `json:"dollars"`
				} `json:"day"`
			} `json:"spend"`
		}
		if err := adminGet(ctx, base+"/admin/v1/tenants/fleet", &v); err != nil {
			return -1
		}
		return v.Spend.Day.Dollars
	}

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		refusals []*anthropic.Error
		served   int
		failures []string
	)
	stopWatch, watchDone := make(chan struct{}), make(chan struct{})
	var maxSeen float64
	go func() {
		// Sample the tenant's spend while the agents run.
		defer close(watchDone)
		for i := 0; i < 6000; i++ {
			select {
			case <-stopWatch:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if s := daySpend(reps[i%2].base); s > maxSeen {
				maxSeen = s
			}
		}
	}()
	for th := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for call := range 200 {
				// A new trajectory for every call: a run's budget is no
				// way around the tenant's.
				c := anthropic.NewClient(option.WithBaseURL(reps[(th+call)%2].base), option.WithAPIKey(replicaKey),
					option.WithMaxRetries(0), option.WithHeader("X-Gatekeeper-Trajectory", fmt.Sprintf("run-%02d-%03d", th, call)),
					option.WithHeader("X-Mock-Turn", `{"kind":"text","text":"The logs show three restarts and one failed health check."}`))
				_, err := c.Messages.New(ctx, params)
				var ae *anthropic.Error
				switch {
				case err == nil:
					mu.Lock()
					served++
					mu.Unlock()
					continue
				case errors.As(err, &ae) && ae.StatusCode == http.StatusTooManyRequests:
					// The tenant's calls in flight held the rest for too long.
					continue
				case errors.As(err, &ae) && ae.StatusCode == http.StatusPaymentRequired:
					mu.Lock()
					refusals = append(refusals, ae)
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
	if len(refusals) != 20 {
		t.Fatalf("%d of 20 agents were refused", len(refusals))
	}
	spend := daySpend(reps[1].base)
	t.Logf("%d calls served, each in a run of its own; tenant spend $%.4f of $%.0f a day (max sampled $%.4f, one call at most $%.4f)",
		served, spend, ceiling, maxSeen, oneCall)
	if spend > ceiling+oneCall || maxSeen > ceiling+oneCall {
		t.Errorf("spend $%.4f (max sampled $%.4f) passed the tenant's ceiling $%.0f by more than one call", spend, maxSeen, ceiling)
	}
	if spend < ceiling*0.5 {
		t.Errorf("spend $%.4f: the tenant was refused long before its ceiling", spend)
	}
	resets := regexp.MustCompile(`resets, as earlier spend leaves the window, at (\S+)$`)
	for _, ae := range refusals {
		msg := ae.Error()
		m := resets.FindStringSubmatch(errMessage(ae))
		if !strings.Contains(msg, "budget_exceeded") || !strings.Contains(msg, "tenant fleet has reached its dollars_per_day limit") || m == nil {
			t.Fatalf("refusal does not name the tenant's limit and when it resets: %s", msg)
		}
		at, err := time.Parse(time.RFC3339, m[1])
		if err != nil || !at.After(time.Now().Add(-time.Minute)) || at.After(time.Now().Add(25*time.Hour)) {
			t.Fatalf("reset time %q: %v", m[1], err)
		}
		if got := ae.Response.Header.Get("X-Should-Retry"); got != "false" {
			t.Fatalf("x-should-retry = %q", got)
		}
	}

	t.Run("operators only", func(t *testing.T) {
		call := func(base string, hdr ...option.RequestOption) error {
			opts := append([]option.RequestOption{option.WithBaseURL(base), option.WithAPIKey(operatorsKey), option.WithMaxRetries(0),
				option.WithHeader("X-Mock-Turn", `{"kind":"text","text":"done"}`)}, hdr...)
			c := anthropic.NewClient(opts...)
			_, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}})
			return err
		}
		refused := func(name string, err error, want string) {
			var ae *anthropic.Error
			if !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden || !strings.Contains(ae.Error(), want) {
				t.Fatalf("%s: %v, want a 403 saying %q", name, err, want)
			}
		}
		refused("implicit run", call(reps[0].base), "this request names no trajectory")
		refused("agent-named run", call(reps[1].base, option.WithHeader("X-Gatekeeper-Trajectory", "agent-pick")), "no operator created trajectory agent-pick")
		refused("agent-named run in the path", call(reps[0].base+"/t/path-pick/anthropic"), "no operator created trajectory path-pick")
		refused("a session of its own", call(reps[0].base, option.WithHeader("X-Claude-Code-Session-Id", "sess-1")), "names no trajectory")

		// An operator creates the run through one replica; the agent
		// uses it through the other.
		req, _ := http.NewRequestWithContext(ctx, "POST", reps[0].base+"/admin/v1/trajectories", strings.NewReader(`{"id":"curated-1","tenant":"curated"}`))
		req.Header.Set("Authorization", "Bearer "+replicaAdmin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("creating curated-1: %d", resp.StatusCode)
		}
		if err := call(reps[1].base, option.WithHeader("X-Gatekeeper-Trajectory", "curated-1")); err != nil {
			t.Fatalf("a call of the operator's run: %v", err)
		}
		for _, id := range []string{"agent-pick", "path-pick"} {
			var v json.RawMessage
			if err := adminGet(ctx, reps[0].base+"/admin/v1/trajectories/"+id, &v); err == nil {
				t.Fatalf("a refused request left trajectory %s behind: %s", id, v)
			}
		}
	})
}

// errMessage is the message of an API error's body.
func errMessage(ae *anthropic.Error) string {
	var b struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(ae.RawJSON()), &b)
	return strings.TrimSpace(b.Error.Message)
}

// adminGet reads an admin API answer into out; an answer outside 2xx is
// an error.
func adminGet(ctx context.Context, url string, out any) error {
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+replicaAdmin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	return json.Unmarshal(b, out)
}

// TestReplicasTenantsShareAName: two tenants call trajectory run-42 at
// once through two gatekeeper processes on one Redis (and a cluster):
// every call goes through, each agent is told run-42, and each tenant's
// calls count on its own record only.
func TestReplicasTenantsShareAName(t *testing.T) {
	redistest.Each(t, testReplicasTenantsShareAName)
}

func testReplicasTenantsShareAName(t *testing.T, r redistest.Target) {
	mock := httptest.NewServer(mockprovider.New(mockprovider.Options{}))
	defer mock.Close()
	cfgText := fmt.Sprintf(`
listen: 127.0.0.1:0
store: %s
providers:
  - {name: anthropic, api: anthropic, base_url: %q, default: true, keys: [{name: k, key: sk-upstream-0001}]}
tenants:
  - {name: team-a, keys: [%s]}
  - {name: team-b, keys: [%s]}
admin:
  tokens: [{name: ops, token: %s, roles: [operator]}]
log: {level: info, format: json}
`, storeYAML(r), mock.URL, replicaKey, operatorsKey, replicaAdmin)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	reps := []*replica{startReplica(t, cfg), startReplica(t, cfg)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const calls = 8
	var wg sync.WaitGroup
	errs := make(chan error, 2*calls)
	for k, key := range []string{replicaKey, operatorsKey} {
		for i := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var resp *http.Response
				c := anthropic.NewClient(option.WithBaseURL(reps[(k+i)%2].base), option.WithAPIKey(key), option.WithMaxRetries(0),
					option.WithHeader("X-Gatekeeper-Trajectory", "run-42"), option.WithHeader("X-Mock-Turn", `{"kind":"text","text":"done"}`))
				_, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64,
					Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(fmt.Sprintf("task %d", i)))}},
					option.WithResponseInto(&resp))
				switch {
				case err != nil:
					errs <- err
				case !strings.HasPrefix(resp.Header.Get("X-Gatekeeper-Trajectory")+"/", "run-42/"):
					errs <- fmt.Errorf("told it is in %q", resp.Header.Get("X-Gatekeeper-Trajectory"))
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, tn := range []string{"team-a", "team-b"} {
		// A turn's settle reaches Redis up to store.settle_window after
		// its reply (docs/operations/redis.md, "A turn's round trips"), later when a loaded
		// machine delays the write-behind queue or its retries: the record
		// is read until it holds every turn, for 30 s at most, and what
		// was read on the way is reported if it never does.
		var seen []string // each change of what was read, with when
		last, ok := "", false
		start := time.Now()
		for time.Since(start) < 30*time.Second {
			var rec struct {
				Tenant string `json:"tenant"`
				Spend  struct {
					Turns int `json:"turns"`
				} `json:"spend"`
			}
			rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := adminGet(rctx, reps[1].base+"/admin/v1/trajectories/"+tn+"/run-42", &rec)
			rcancel()
			got := fmt.Sprintf("tenant %q, %d turns", rec.Tenant, rec.Spend.Turns)
			if err != nil {
				got = err.Error()
			}
			if got != last {
				seen = append(seen, fmt.Sprintf("%s: %s", time.Since(start).Round(time.Millisecond), got))
				last = got
			}
			if ok = err == nil && rec.Tenant == tn && rec.Spend.Turns == calls; ok {
				break
			}
			if err == nil && rec.Spend.Turns > calls {
				break // a count past the calls made does not come back down
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !ok {
			t.Errorf("%s's run-42 never held its own %d turns; read (from the start of the wait):\n%s", tn, calls, strings.Join(seen, "\n"))
		}
	}
}
