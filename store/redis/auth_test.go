package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"gatekeeper/internal/redistest"
	"gatekeeper/trajectory"
)

// TestPassword opens stores with a password in the URL, on one Redis and
// on a cluster that require it: records and signals work; a wrong
// password is refused at Open, and no error quotes it.
func TestPassword(t *testing.T) {
	const pw, wrong = "gk-redis-secret-0001", "gk-wrong-secret-0002"
	targets := []struct {
		name    string
		url     func(t *testing.T) string
		cluster bool
	}{
		{"single", func(t *testing.T) string { return redistest.StartServer(t, "--requirepass", pw).URL }, false},
		{"cluster", func(t *testing.T) string { return redistest.StartCluster(t, "--requirepass", pw).URL }, true},
	}
	for _, tc := range targets {
		t.Run(tc.name, func(t *testing.T) {
			url := tc.url(t)
			if !strings.Contains(url, pw) {
				t.Fatalf("URL %q carries no password", url)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s := openOpts(t, Options{URL: url, Cluster: tc.cluster})
			create(t, s, trajectory.New("run-1", "team-a", t0))
			if _, err := s.Get(ctx, "run-1"); err != nil {
				t.Fatal(err)
			}
			sigs := subscribe(t, s, ctx)
			sig := trajectory.Signal{ID: "run-1", Kind: trajectory.ControlCancel}
			if err := s.Publish(ctx, sig); err != nil {
				t.Fatal(err)
			}
			if got := receive(t, "subscriber", sigs); got != sig {
				t.Errorf("received %+v, want %+v", got, sig)
			}

			_, err := Open(ctx, Options{URL: strings.Replace(url, pw, wrong, 1), Cluster: tc.cluster})
			if err == nil {
				t.Fatal("Open with a wrong password succeeded")
			}
			if strings.Contains(err.Error(), wrong) || strings.Contains(err.Error(), pw) {
				t.Errorf("the error quotes a password: %v", err)
			}
			if errors.Is(err, trajectory.ErrUnavailable) {
				t.Errorf("a wrong password is reported as Redis unavailable: %v", err)
			}
		})
	}
}

// TestTLSURL: rediss:// gives the client TLS, checked against the URL's
// host, in both modes.
func TestTLSURL(t *testing.T) {
	single, err := NewClient("rediss://:pw@redis.internal:6380/0")
	if err != nil {
		t.Fatal(err)
	}
	defer single.Close()
	cluster, err := NewClusterClient("rediss://:pw@node-1.internal:6380?addr=node-2.internal:6380")
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	so, co := single.Options(), cluster.Options()
	if so.TLSConfig == nil || so.TLSConfig.ServerName != "redis.internal" || so.Password != "pw" {
		t.Errorf("single client: TLS %+v, password set %t", so.TLSConfig, so.Password == "pw")
	}
	if co.TLSConfig == nil || co.TLSConfig.ServerName != "node-1.internal" || co.Password != "pw" || len(co.Addrs) != 2 {
		t.Errorf("cluster client: TLS %+v, password set %t, nodes %v", co.TLSConfig, co.Password == "pw", co.Addrs)
	}
	if _, err := NewClusterClient("redis://:pw@[::1"); err == nil || strings.Contains(err.Error(), "pw") {
		t.Errorf("a bad cluster URL: %v; want an error that does not quote it", err)
	}
}
