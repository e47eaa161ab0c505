package main

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/internal/redistest"
)

func TestParseRedisCPU(t *testing.T) {
	cases := []struct {
		name string
		info string
		want time.Duration
		ok   bool
	}{
		{"both", "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:0.500000\r\nused_cpu_sys_children:9.0\r\n", 1750 * time.Millisecond, true},
		{"user missing", "# CPU\r\nused_cpu_sys:1.25\r\n", 0, false},
		{"not a number", "used_cpu_sys:x\r\nused_cpu_user:1\r\n", 0, false},
		{"negative", "used_cpu_sys:-1\r\nused_cpu_user:1\r\n", 0, false},
		{"empty", "", 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseRedisCPU(tc.info)
			if (err == nil) != tc.ok || got != tc.want {
				t.Fatalf("parseRedisCPU(%q) = %s, %v; want %s, ok=%t", tc.info, got, err, tc.want, tc.ok)
			}
		})
	}
}

// TestRedisCPUGrows reads a real redis-server's CPU before and after work.
func TestRedisCPUGrows(t *testing.T) {
	srv := redistest.StartServer(t)
	opt, err := goredis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opt)
	defer c.Close()
	b := &bench{redis: c}
	ctx := context.Background()
	before, err := b.redisCPU(ctx)
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
		after, err := b.redisCPU(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if after > before {
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Fatal("redis-server's CPU did not grow with the work sent to it")
}
