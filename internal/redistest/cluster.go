package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// clusterMasters is how many masters a test cluster has: enough that a
// chain, its index and its signals can land on different nodes.
const clusterMasters = 3

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// clusterTimeout bounds the wait for every node to agree that the cluster
// is up.
const clusterTimeout = 30 * time.Second

// Cluster is a Redis Cluster of real redis-server processes on loopback,
// each a master of a third of the slots, without replicas.
type Cluster struct {
	// URL is go-redis's cluster URL form: the first node, the others as
	// addr= query parameters.
	URL     string
	Servers []*Server
}

// StartCluster runs a three-master Redis Cluster for t, each node with the
// extra arguments, and waits until every node reports it up. The servers
// are killed, by their PIDs, when t ends.
func StartCluster(t testing.TB, extra ...string) *Cluster {
	t.Helper()
	bin := lookup(t)
	c := &Cluster{}
	for i := range clusterMasters {
		dir := filepath.Join(t.TempDir(), strconv.Itoa(i))
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		var errs []error
		for range portAttempts {
			s, err := start(bin, dir, append([]string{"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
				"--cluster-node-timeout", "5000", "--cluster-require-full-coverage", "yes"}, extra...)...)
			if err == nil {
				t.Cleanup(func() {
					if err := s.Stop(); err != nil {
						t.Errorf("redis-server %s: %v", s.Addr, err)
					}
				})
				c.Servers = append(c.Servers, s)
				break
			}
			errs = append(errs, err)
		}
		if len(c.Servers) != i+1 {
			t.Fatalf("cluster node %d did not start: %v", i, errors.Join(errs...))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if err := c.form(ctx); err != nil {
		t.Fatalf("forming the cluster: %v", err)
	}
	addrs := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		addrs[i] = s.Addr
	}
	c.URL = "redis://" + userinfo(password(extra)) + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
	return c
}

// form assigns each node a contiguous range of slots, introduces the nodes
// to each other and waits until each of them sees the cluster up with every
// master known.
func (c *Cluster) form(ctx context.Context) error {
	clients := make([]*goredis.Client, len(c.Servers))
	for i, s := range c.Servers {
		clients[i] = goredis.NewClient(&goredis.Options{Addr: s.Addr, Password: s.Password, MaxRetries: -1})
		defer clients[i].Close()
	}
	per := clusterSlots / len(clients)
	for i, cl := range clients {
		lo, hi := i*per, (i+1)*per-1
		if i == len(clients)-1 {
			hi = clusterSlots - 1
		}
		if err := cl.ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTSRANGE %d %d on %s: %w", lo, hi, c.Servers[i].Addr, err)
		}
	}
	for _, s := range c.Servers[1:] {
		host, port, err := net.SplitHostPort(s.Addr)
		if err != nil {
			return err
		}
		if err := clients[0].ClusterMeet(ctx, host, port).Err(); err != nil {
			return fmt.Errorf("CLUSTER MEET %s: %w", s.Addr, err)
		}
	}
	// Gossip spreads the meeting and the slots in a few node-timeout
	// ticks; the bound is the caller's context.
	want := "cluster_known_nodes:" + strconv.Itoa(len(clients))
	for i, cl := range clients {
		for {
			info, err := cl.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, want) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("node %s not up: %v (last CLUSTER INFO: %q)", c.Servers[i].Addr, ctx.Err(), info)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// Flush empties every node, so a test starts clean.
func (c *Cluster) Flush(t testing.TB) {
	t.Helper()
	for _, s := range c.Servers {
		s.Flush(t)
	}
}

// Stop kills every node.
func (c *Cluster) Stop() error {
	var errs []error
	for _, s := range c.Servers {
		errs = append(errs, s.Stop())
	}
	return errors.Join(errs...)
}

// lookup finds redis-server, or skips (fails under CI) as StartServer does.
func lookup(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server is not on PATH, and CI is set: the CI script installs it (%v)", err)
		}
		t.Skipf("redis-server is not on PATH; install it to run the Redis tests (%v)", err)
	}
	return bin
}
