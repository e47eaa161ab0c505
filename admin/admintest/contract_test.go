package admintest

import (
	"context"
	"testing"
)

// TestMatch: a path finds its operation, a literal segment beating a
// parameter, and an escaped slash stays within the id.
func TestMatch(t *testing.T) {
	c, err := Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, method, path, want, id string
	}{
		{"control", "POST", "/admin/v1/trajectories/run-42/pause", "controlTrajectory", "run-42"},
		{"child id escaped", "POST", "/admin/v1/trajectories/run-42%2F3f9a/kill", "controlTrajectory", "run-42/3f9a"},
		{"literal beats parameter", "POST", "/admin/v1/trajectories/run-42/interrupt", "interruptTrajectory", "run-42"},
		{"outcome", "POST", "/admin/v1/trajectories/run-42/outcome", "markOutcome", "run-42"},
		{"events", "GET", "/admin/v1/trajectories/run-42/events", "listTrajectoryEvents", "run-42"},
		{"record", "GET", "/admin/v1/trajectories/run-42", "getTrajectory", "run-42"},
		{"raw slash is not one id", "GET", "/admin/v1/trajectories/run-42/3f9a", "", ""},
		{"method", "DELETE", "/admin/v1/trajectories/run-42", "", ""},
		{"empty id", "GET", "/admin/v1/trajectories/", "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o, params, err := c.Match(tt.method, tt.path)
			switch {
			case tt.want == "" && err == nil:
				t.Fatalf("matched %s, want no operation", o.ID)
			case tt.want == "":
			case err != nil:
				t.Fatal(err)
			case o.ID != tt.want || params["id"] != tt.id:
				t.Fatalf("matched %s with id %q, want %s with %q", o.ID, params["id"], tt.want, tt.id)
			}
		})
	}
}

// TestCheckEvent: events of each shape pass; a member renamed, added or
// of the wrong type fails.
func TestCheckEvent(t *testing.T) {
	c, err := Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, event string
		ok          bool
	}{
		{"keys", `{"id":"1-0","kind":"keys","at":"2026-12-03T10:00:00Z","data":{"headroom":{"anthropic/main":0.5},"queues":{"interactive":0}}}`, true},
		{"dropped", `{"kind":"dropped","at":"2026-12-03T10:00:00Z","data":{"reason":"behind","last_id":"1-0"}}`, true},
		{"keys headroom over 1", `{"id":"1-0","kind":"keys","at":"2026-12-03T10:00:00Z","data":{"headroom":{"anthropic/main":1.5},"queues":{}}}`, false},
		{"keys without id", `{"kind":"keys","at":"2026-12-03T10:00:00Z","data":{"headroom":{},"queues":{}}}`, false},
		{"dropped member renamed", `{"kind":"dropped","at":"2026-12-03T10:00:00Z","data":{"reason":"behind","last":"1-0"}}`, false},
		{"unknown kind", `{"id":"1-0","kind":"budget","at":"2026-12-03T10:00:00Z","data":{}}`, false},
		{"at not a time", `{"kind":"dropped","at":"yesterday","data":{"reason":"behind","last_id":"1-0"}}`, false},
		{"not JSON", `{"kind":`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := c.CheckEvent([]byte(tt.event)); (err == nil) != tt.ok {
				t.Fatalf("CheckEvent = %v, want ok %v", err, tt.ok)
			}
		})
	}
}
