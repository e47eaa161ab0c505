package proxy_test

import (
	"net/http"
	"testing"
)

// TestReloadKeepsKeyState: a config reload that keeps a provider key by
// name keeps its rate-limit bucket (a key whose minute is spent stays
// spent), and one that renames it sends the next turn to the new key's
// full bucket; the old key gets nothing new.
func TestReloadKeepsKeyState(t *testing.T) {
	const oldKey, newKey = "sk-reload-key-one", "sk-reload-key-two"
	o := rlOpts{keys: `[{name: k, key: ` + oldKey + `, rpm: 2, rpm_burst: 2}]`, maxWait: "50ms"}
	e := newRLEnv(t, o)
	ctx := ctxT(t)
	status := func(id string) int {
		t.Helper()
		a, err := e.turn(t, ctx, vkStd, id, smallTurn)
		if err != nil {
			t.Fatal(err)
		}
		return a.status
	}
	for i, id := range []string{"r1", "r2"} {
		if got := status(id); got != http.StatusOK {
			t.Fatalf("turn %d within the key's burst: %d", i+1, got)
		}
	}
	if got := status("r3"); got != http.StatusTooManyRequests {
		t.Fatalf("a turn past the key's burst: %d, want 429", got)
	}

	// The same key, by name, after a reload: still spent.
	if err := e.px.Reload(rlConfig(t, e.mockURL, o), nil); err != nil {
		t.Fatal(err)
	}
	if got := status("r4"); got != http.StatusTooManyRequests {
		t.Fatalf("a turn after a reload that kept the key: %d, want 429 (the bucket kept)", got)
	}

	// Renamed: a new bucket, full.
	o.keys = `[{name: k2, key: ` + newKey + `, rpm: 2, rpm_burst: 2}]`
	if err := e.px.Reload(rlConfig(t, e.mockURL, o), nil); err != nil {
		t.Fatal(err)
	}
	if got := status("r5"); got != http.StatusOK {
		t.Fatalf("a turn after a reload that renamed the key: %d, want 200", got)
	}
	reqs := e.mock.Requests()
	if last := reqs[len(reqs)-1]; last.APIKey != newKey {
		t.Errorf("the turn after the rename went on %q, want the new key", last.APIKey)
	}
	for _, r := range reqs {
		if r.APIKey != oldKey && r.APIKey != newKey {
			t.Errorf("the provider saw key %q", r.APIKey)
		}
	}
}
