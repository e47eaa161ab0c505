package admin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"gatekeeper/admin"
	"gatekeeper/feed"
	"gatekeeper/store/memory"
	"gatekeeper/trajectory"
)

// streamSetup serves the admin API over a record store that publishes to
// a memory feed.
func streamSetup(t *testing.T) (string, *feed.Records, *feed.Keys) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, err := feed.New(ctx, feed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close(context.Background()) })
	st := feed.NewRecords(memory.New(memory.Options{}), f)
	keys := feed.NewKeys(f, nil)
	r := chi.NewRouter()
	admin.New(testConfig(t), st, nil, nil, admin.WithSignals(st), admin.WithStream(f, keys)).Routes(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL, st, keys
}

// sse is one event read from a stream.
type sse struct {
	id, event string
	data      feed.Event
}

// openStream connects and returns a function reading the next event
// (keepalive comments skipped); the stream closes when the test ends.
func openStream(t *testing.T, base, query, lastID string) func() sse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/admin/v1/stream"+query, nil)
	req.Header.Set("Authorization", "Bearer "+apprToken)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	return readStream(t, req)
}

// readStream sends req and returns a function reading the stream's next
// event (keepalive comments skipped).
func readStream(t *testing.T, req *http.Request) func() sse {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = res.Body.Close() })
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	rd := bufio.NewReader(res.Body)
	return func() sse {
		t.Helper()
		var ev sse
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatalf("reading the stream: %v", err)
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case line == "" && ev.event != "":
				return ev
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				if err := json.Unmarshal([]byte(line[6:]), &ev.data); err != nil {
					t.Fatalf("data %q: %v", line, err)
				}
			}
		}
	}
}

func createRun(t *testing.T, st trajectory.Store, id string) {
	t.Helper()
	if err := st.Create(context.Background(), trajectory.New(id, "team-a", time.Now())); err != nil {
		t.Fatal(err)
	}
}

// TestStreamResumeWithLastEventID: a client that breaks off and comes
// back with Last-Event-ID gets every event it missed, once, then the live
// ones.
func TestStreamResumeWithLastEventID(t *testing.T) {
	base, st, _ := streamSetup(t)
	first := openStream(t, base, "?kind=record", "")
	createRun(t, st, "run-1")
	ev := first()
	if ev.event != "record" || ev.data.Trajectory != "run-1" || ev.id == "" || ev.id != ev.data.ID {
		t.Fatalf("first event = %+v", ev)
	}
	// Gone: the client's connection is dropped here in effect, and
	// changes go on.
	for _, id := range []string{"run-2", "run-3", "run-4"} {
		createRun(t, st, id)
	}
	resumed := openStream(t, base, "?kind=record", ev.id)
	createRun(t, st, "run-5")
	for _, want := range []string{"run-2", "run-3", "run-4", "run-5"} {
		if got := resumed(); got.data.Trajectory != want {
			t.Fatalf("resumed stream: got %s, want %s", got.data.Trajectory, want)
		}
	}
}

func TestStreamFilters(t *testing.T) {
	base, st, _ := streamSetup(t)
	tree := openStream(t, base, "?trajectory=run-1&kind=record", "")
	createRun(t, st, "run-10")
	createRun(t, st, "run-1")
	child := trajectory.New("run-1/a", "team-a", time.Now())
	child.ParentID = "run-1"
	if err := st.Create(context.Background(), child); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"run-1", "run-1/a"} {
		if got := tree(); got.data.Trajectory != want {
			t.Fatalf("got %s, want %s", got.data.Trajectory, want)
		}
	}
}

func TestStreamRefusals(t *testing.T) {
	base, _, _ := streamSetup(t)
	for _, tc := range []struct {
		name, query, token, lastID string
		code                       int
	}{
		{"no token", "", "", "", http.StatusUnauthorized},
		{"unknown kind", "?kind=record,nope", apprToken, "", http.StatusBadRequest},
		{"bad Last-Event-ID", "", apprToken, "yesterday", http.StatusBadRequest},
		{"long tenant", "?tenant=" + strings.Repeat("x", 1025), apprToken, "", http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, base+"/admin/v1/stream"+tc.query, nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			if tc.lastID != "" {
				req.Header.Set("Last-Event-ID", tc.lastID)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			if res.StatusCode != tc.code {
				t.Errorf("status %d, want %d", res.StatusCode, tc.code)
			}
		})
	}
}

func TestWhoamiAndKeys(t *testing.T) {
	base, _, keys := streamSetup(t)
	code, me := call(t, http.MethodGet, base+"/admin/v1/whoami", opToken, "")
	if code != http.StatusOK || me["name"] != "alice" || len(me["roles"].([]any)) != 1 || me["roles"].([]any)[0] != "operator" {
		t.Errorf("whoami = %d %v", code, me)
	}
	if st, _ := me["budget_stages"].(map[string]any); st["restrict"] != 0.9 {
		t.Errorf("whoami budget_stages = %v", me["budget_stages"])
	}
	keys.Headroom("anthropic/k", 0.25)
	keys.QueueLength("batch", 3)
	code, body := call(t, http.MethodGet, base+"/admin/v1/keys", apprToken, "")
	b, _ := json.Marshal(body)
	if code != http.StatusOK || !strings.Contains(string(b), `"key":"anthropic/k"`) || !strings.Contains(string(b), `"headroom":0.25`) ||
		!strings.Contains(string(b), `"queues":{"batch":3}`) || strings.Contains(string(b), "sk-x") {
		t.Errorf("keys = %d %s", code, b)
	}
}

func FuzzParseStreamFilter(f *testing.F) {
	for _, q := range []string{"kind=record,turn&tenant=a", "trajectory=run-1%2Fa", "kind=", "kind=keys&kind=approval", "tenant=%zz"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		v, err := url.ParseQuery(q)
		if err != nil {
			return
		}
		flt, err := admin.ParseStreamFilter(v)
		if err != nil {
			return
		}
		for _, k := range flt.Kinds {
			if !k.Valid() {
				t.Fatalf("%q: kept kind %q", q, k)
			}
		}
		if len(flt.Tenant) > 1024 || len(flt.Trajectory) > 1024 {
			t.Fatalf("%q: kept an id past 1024 bytes", q)
		}
	})
}
