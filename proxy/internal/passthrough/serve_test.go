package passthrough

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"gatekeeper/config"
	"gatekeeper/proxy/internal/admit"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/keys"
	"gatekeeper/store/memory"
	"gatekeeper/trajectory"
)

func TestGateServe(t *testing.T) {
	ctx := context.Background()
	var gotKey string
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotKey = r.Header.Get("X-Api-Key")
		w.WriteHeader(http.StatusOK)
	}))
	defer backend.Close()
	p := &config.Provider{Name: "prov", API: config.APIAnthropic, BaseURL: backend.URL, Keys: []config.ProviderKey{{Name: "a", Key: "sk-a"}}}
	up, err := Build(p, Shared{Transport: http.DefaultTransport, Logger: discard, Secrets: func() []string { return []string{"sk-a"} }})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	store := memory.New(memory.Options{Clock: func() time.Time { return now }})
	for id, state := range map[string]trajectory.State{"done": trajectory.Completed, "held": trajectory.Paused, "live": trajectory.Ready} {
		rec := trajectory.New(id, "acme", now)
		rec.State = state
		if err := store.Create(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	g := &Gate{Store: store, Scoped: func(_ context.Context, id, _ string) (string, error) { return id, nil },
		MaxBody: 1 << 20, BodyTimeout: time.Second, Logger: discard}
	tenant := &config.Tenant{Name: "acme"}

	tests := []struct {
		name, method, path, run string
		want                    func(error) bool // the refusal; nil: forwarded
		closes                  bool
	}{
		{name: "allowed", method: http.MethodGet, path: "/v1/models"},
		{name: "allowed in a live run", method: http.MethodGet, path: "/v1/models", run: "live"},
		{name: "not on the allowlist", method: http.MethodPost, path: "/v1/files", closes: true,
			want: func(err error) bool { var e *apierr.Error; return errors.As(err, &e) && e.Code == http.StatusNotFound }},
		{name: "ended run", method: http.MethodGet, path: "/v1/models", run: "done", closes: true,
			want: func(err error) bool { var r *admit.Refusal; return errors.As(err, &r) && r.Kind == admit.RunEnded }},
		{name: "paused run", method: http.MethodGet, path: "/v1/models", run: "held", closes: true,
			want: func(err error) bool {
				var e *apierr.Error
				return errors.As(err, &e) && e.Code == http.StatusServiceUnavailable && e.Type == apierr.TrajectoryPaused
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gotKey = ""
			w := httptest.NewRecorder()
			r := httptest.NewRequest(tc.method, "/prov"+tc.path, nil)
			var failed error
			g.Serve(w, r, Call{Provider: "prov", Allow: up.Allow, Proxy: up.Proxy, Path: tc.path, Run: tc.run, Tenant: tenant, ID: "req_1",
				Keys: (*keys.Scheduler)(nil).Turn(up.Pool, "")}, func(_ http.ResponseWriter, err error) { failed = err })
			if tc.want == nil {
				if failed != nil || w.Code != http.StatusOK || gotKey != "sk-a" {
					t.Fatalf("refused %v, status %d, key %q; want forwarded on sk-a", failed, w.Code, gotKey)
				}
				return
			}
			if !tc.want(failed) || gotKey != "" {
				t.Errorf("refusal %v (forwarded with key %q)", failed, gotKey)
			}
			if got := w.Header().Get("Connection") == "close"; got != tc.closes {
				t.Errorf("Connection: close %v, want %v", got, tc.closes)
			}
		})
	}
}
