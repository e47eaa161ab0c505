package main

import (
	"context"
	"testing"
	"time"

	"gatekeeper/internal/redistest"
)

func TestParseRedisInfo(t *testing.T) {
	const all = "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:0.500000\r\nused_cpu_sys_children:9.0\r\n" +
		"# Stats\r\ntotal_commands_processed:42\r\n# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\n" +
		"# Commandstats\r\ncmdstat_evalsha:calls=5,usec=100,usec_per_call=20.00\r\ncmdstat_xadd:calls=9,usec=9\r\ncmdstat_eval:calls=2,usec=1\r\n"
	cases := []struct {
		name string
		info string
		want redisCounters
		ok   bool
	}{
		{"all", all, redisCounters{cpu: 1750 * time.Millisecond, commands: 42, memory: 1 << 20, scripts: 7}, true},
		{"script calls not a number", all + "cmdstat_evalsha_ro:calls=x,usec=1\r\n", redisCounters{}, false},
		{"user missing", "used_cpu_sys:1.25\r\ntotal_commands_processed:1\r\nused_memory:1\r\n", redisCounters{}, false},
		{"commands missing", "used_cpu_sys:1\r\nused_cpu_user:1\r\nused_memory:1\r\n", redisCounters{}, false},
		{"not a number", "used_cpu_sys:x\r\nused_cpu_user:1\r\ntotal_commands_processed:1\r\nused_memory:1\r\n", redisCounters{}, false},
		{"negative", "used_cpu_sys:-1\r\nused_cpu_user:1\r\ntotal_commands_processed:1\r\nused_memory:1\r\n", redisCounters{}, false},
		{"commands not an integer", "used_cpu_sys:1\r\nused_cpu_user:1\r\ntotal_commands_processed:1.5\r\nused_memory:1\r\n", redisCounters{}, false},
		{"empty", "", redisCounters{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseRedisInfo(tc.info)
			if (err == nil) != tc.ok || got != tc.want {
				t.Fatalf("parseRedisInfo(%q) = %+v, %v; want %+v, ok=%t", tc.info, got, err, tc.want, tc.ok)
			}
		})
	}
}

// TestRedisCountersGrow reads a real redis-server's counters before and
// after work, and the refusal of a database that holds keys.
func TestRedisCountersGrow(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	c, err := redisClient(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := &bench{redis: c}
	before, err := b.redisCounters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Enough work for the server's clock of its CPU to move, bounded.
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < 1000; i++ {
		pipe := c.Pipeline()
		for j := range 1000 {
			pipe.Set(ctx, "k", j, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		after, err := b.redisCounters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if after.commands < before.commands+1000 {
			t.Fatalf("commands %d after 1000 SETs, before %d", after.commands, before.commands)
		}
		if after.cpu > before.cpu {
			if _, err := redisClient(ctx, srv.URL); err == nil {
				t.Error("redisClient accepted a database that holds keys")
			}
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Fatal("redis-server's CPU did not grow with the work sent to it")
}
