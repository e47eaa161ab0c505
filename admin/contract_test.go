package admin_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"gatekeeper/admin"
	"gatekeeper/admin/admintest"
	"gatekeeper/feed"
	"gatekeeper/store/memory"
	"gatekeeper/trajectory"
)

// TestOpenAPIRoutes fails when a route of the admin router is not in the
// OpenAPI document, or an operation of the document reaches no route:
// each documented path, its parameters filled in (every value of an
// enumerated one), must find a route of its method, and every route under
// /admin/v1 must be found by one.
func TestOpenAPIRoutes(t *testing.T) {
	c, err := admintest.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	admin.New(testConfig(t), memory.New(memory.Options{}), nil, nil, admin.WithReloader(noReloads{}), admin.WithSpendLimits(memory.NewSpendLimits())).Routes(r)
	routed := map[string]bool{}
	err = chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if strings.HasPrefix(route, "/admin/v1/") {
			routed[method+" "+route] = false
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range c.Operations() {
		for _, path := range o.Samples() {
			pattern := r.Find(chi.NewRouteContext(), o.Method, path)
			if _, ok := routed[o.Method+" "+pattern]; !ok {
				t.Errorf("documented %s %s (%s, as %s) reaches no route of the admin router", o.Method, o.Path, o.ID, path)
				continue
			}
			routed[o.Method+" "+pattern] = true
		}
	}
	for route, documented := range routed {
		if !documented {
			t.Errorf("route %s is not in admin/openapi.json", route)
		}
	}
	if len(routed) < 10 {
		t.Fatalf("walked %d admin routes; the walk is broken", len(routed))
	}
}

// TestContractServed: both documents are served, as kept, without a token
// and whatever token comes.
func TestContractServed(t *testing.T) {
	r := chi.NewRouter()
	admin.New(testConfig(t), memory.New(memory.Options{}), nil, nil).Routes(r)
	srv := httptest.NewServer(r)
	defer srv.Close()
	for _, tt := range []struct {
		path, contentType string
		want              []byte
	}{
		{"/admin/v1/openapi.json", "application/json", admin.OpenAPI()},
		{"/admin/v1/events.schema.json", "application/schema+json", admin.EventsSchema()},
	} {
		for _, token := range []string{"", "not-a-token-of-this-gatekeeper", opToken} {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+tt.path, nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != tt.contentType || !bytes.Equal(body, tt.want) || len(body) < 1000 {
				t.Errorf("%s with token %q: %d %s, %d bytes; want 200 %s, the embedded %d bytes",
					tt.path, token, res.StatusCode, res.Header.Get("Content-Type"), len(body), tt.contentType, len(tt.want))
			}
		}
	}
}

// TestStreamResetMatchesSchema: a stream resumed from an event the log no
// longer keeps opens with a reset event, then what the log keeps; each
// validates against the events' schema.
func TestStreamResetMatchesSchema(t *testing.T) {
	c, err := admintest.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f, st, srv := streamServer(ctx, t, feed.Options{Retain: 2})
	for i := range 4 {
		createRun(t, st, fmt.Sprintf("run-%d", i))
	}
	for i := 0; f.Stats().Published < 4; i++ {
		if i == 200 {
			t.Fatalf("published %d of 4 events after 2 s", f.Stats().Published)
		}
		time.Sleep(10 * time.Millisecond)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/admin/v1/stream", nil)
	req.Header.Set("Authorization", "Bearer "+apprToken)
	req.Header.Set("Last-Event-ID", "1-0")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	rd := bufio.NewReader(res.Body)
	var kinds []string
	for len(kinds) < 3 {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("after %v: %v", kinds, err)
		}
		data, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "data: ")
		if !ok {
			continue
		}
		if err := c.CheckEvent([]byte(data)); err != nil {
			t.Error(err)
		}
		kind := data[strings.Index(data, `"kind":"`)+8:]
		kinds = append(kinds, kind[:strings.IndexByte(kind, '"')])
	}
	if want := []string{"reset", "record", "record"}; !slices.Equal(kinds, want) {
		t.Errorf("stream resumed from a lost event brought %v, want %v", kinds, want)
	}
}

// TestStreamDroppedMatchesSchema: a subscriber that stops reading while
// events go on is dropped with a last dropped event, which validates
// against the events' schema, as every event before it does.
func TestStreamDroppedMatchesSchema(t *testing.T) {
	c, err := admintest.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, st, srv := streamServer(ctx, t, feed.Options{Buffer: 4})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/admin/v1/stream?kind=record", nil)
	req.Header.Set("Authorization", "Bearer "+apprToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	// Not read while the records are written: the connection's buffers
	// fill, then the subscriber's.
	const runs = 3000
	for i := range runs {
		createRun(t, st, fmt.Sprintf("run-%04d-%s", i, strings.Repeat("x", 100)))
	}
	rd := bufio.NewReader(res.Body)
	var last string
	n := 0
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			break
		}
		data, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "data: ")
		if !ok {
			continue
		}
		if err := c.CheckEvent([]byte(data)); err != nil {
			t.Error(err)
		}
		last, n = data, n+1
	}
	if !strings.Contains(last, `"kind":"dropped"`) || n >= runs {
		t.Fatalf("after %d events the stream ended with %s; want a dropped event before all %d", n, last, runs)
	}
}

// noReloads is a Reloader for tests that only walk the routes.
type noReloads struct{}

func (noReloads) ReloadConfig(context.Context, string) (admin.Reloaded, error) {
	return admin.Reloaded{}, &admin.ReloadRefused{Problems: []string{"no config file"}}
}

// streamServer serves the admin API over a memory store whose records
// feed a live event stream made with o, until the test ends.
func streamServer(ctx context.Context, t *testing.T, o feed.Options) (*feed.Feed, trajectory.Store, *httptest.Server) {
	t.Helper()
	f, err := feed.New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close(context.Background()) })
	st := feed.NewRecords(memory.New(memory.Options{}), f)
	r := chi.NewRouter()
	admin.New(testConfig(t), st, nil, nil, admin.WithStream(f, feed.NewKeys(f, nil))).Routes(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return f, st, srv
}
