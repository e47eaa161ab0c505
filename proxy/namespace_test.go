package proxy_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"

	"gatekeeper/trajectory"
)

// TestTenantsShareAName: two tenants use trajectory run-42 at the same
// time. Each call goes through; each tenant's calls land on its own
// record, and each agent is told it is in run-42; neither learns of the
// other. The admin API finds each by {tenant}/{id} or ?tenant=, and says
// the bare id is ambiguous.
func TestTenantsShareAName(t *testing.T) {
	e := newEnv(t, envOpts{})
	const calls = 10
	var wg sync.WaitGroup
	errs := make(chan string, 2*calls)
	for _, key := range []string{vkA, vkB} {
		for i := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Each call its own conversation: threads of one run.
				resp := e.do(t, "POST", "/v1/messages", anthropicReq(false, fmt.Sprintf("task %d", i)),
					"x-api-key", key, "anthropic-version", "2023-06-01", "content-type", "application/json",
					"X-Gatekeeper-Trajectory", "run-42", "X-Mock-Turn", `{"kind":"text","text":"done"}`)
				body := readAll(t, resp)
				if resp.StatusCode != http.StatusOK {
					errs <- fmt.Sprintf("%d %s", resp.StatusCode, body)
					return
				}
				if got := resp.Header.Get("X-Gatekeeper-Trajectory"); got != "run-42" && !strings.HasPrefix(got, "run-42/") {
					errs <- "told it is in " + got
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	plain := e.record(t, "run-42")
	other := "team-b"
	if plain.Tenant == "team-b" {
		other = "team-a"
	}
	scoped := e.record(t, trajectory.TenantScoped("run-42", other))
	for _, rec := range []*trajectory.Record{plain, scoped} {
		if rec.Spend.Turns != calls {
			t.Errorf("%s's run-42 counted %d turns, want its own %d", rec.Tenant, rec.Spend.Turns, calls)
		}
		for _, c := range rec.Children {
			if ch := e.record(t, c); ch.Tenant != rec.Tenant {
				t.Errorf("%s's run-42 has a thread of %s", rec.Tenant, ch.Tenant)
			}
		}
	}
	if scoped.Tenant != other {
		t.Errorf("the scoped run-42 is %s's, want %s's", scoped.Tenant, other)
	}

	get := func(path string) (int, []byte) {
		resp := e.do(t, "GET", path, "", "Authorization", "Bearer "+adminToken)
		return resp.StatusCode, readAll(t, resp)
	}
	for _, tn := range []string{"team-a", "team-b"} {
		for _, path := range []string{"/admin/v1/trajectories/" + tn + "/run-42", "/admin/v1/trajectories/run-42?tenant=" + tn} {
			code, b := get(path)
			if code != http.StatusOK || gjson.GetBytes(b, "tenant").String() != tn {
				t.Errorf("GET %s: %d %s", path, code, b)
			}
		}
		code, b := get("/admin/v1/trajectories/" + tn + "/run-42/events")
		if code != http.StatusOK || gjson.GetBytes(b, "events.#").Int() == 0 {
			t.Errorf("events of %s's run-42: %d %s", tn, code, b)
		}
	}
	if code, b := get("/admin/v1/trajectories/run-42"); code != http.StatusConflict || !strings.Contains(string(b), "{tenant}") {
		t.Errorf("GET run-42 with two owners: %d %s, want 409 naming the way to address each", code, b)
	}
	// Control by tenant: team-b's pause leaves team-a's run alone.
	resp := e.do(t, "POST", "/admin/v1/trajectories/team-b/run-42/pause", "", "Authorization", "Bearer "+adminToken)
	if b := readAll(t, resp); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("pause team-b/run-42: %d %s", resp.StatusCode, b)
	}
	for _, tn := range []string{"team-a", "team-b"} {
		_, b := get("/admin/v1/trajectories/run-42?tenant=" + tn)
		paused := gjson.GetBytes(b, "pending.control.kind").String() == "pause" || gjson.GetBytes(b, "state").String() == "PAUSED"
		if paused != (tn == "team-b") {
			t.Errorf("after pausing team-b's run-42, %s's: %s", tn, b)
		}
	}
}
