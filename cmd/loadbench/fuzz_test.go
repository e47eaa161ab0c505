package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// The parsers of what other processes write (/proc, /metrics, Redis INFO,
// SSE) never panic and never return a negative figure; the seeds run as
// regular tests.

func FuzzParseStatCPU(f *testing.F) {
	f.Add([]byte("4242 (gate keeper) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 50 0 0 20 0 12 0 100 123456789 2048"))
	f.Add([]byte("1 ()) R"))
	f.Add([]byte("1 (x) S 1 2 3 4 5 6 7 8 9 10 -3 4 5"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if d, err := parseStatCPU(b); err == nil && d < 0 {
			t.Fatalf("negative CPU %s", d)
		}
	})
}

func FuzzParseRSS(f *testing.F) {
	f.Add([]byte("Name:\tgatekeeper\nVmRSS:\t   1234 kB\n"))
	f.Add([]byte("VmRSS: -1 kB\n"))
	f.Add([]byte("VmRSS:\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if n, err := parseRSS(b); err == nil && n < 0 {
			t.Fatalf("negative RSS %d", n)
		}
	})
}

func FuzzParseMetricsAllocs(f *testing.F) {
	f.Add("go_memstats_alloc_bytes_total 1.2e+07\ngo_memstats_mallocs_total 98765\n")
	f.Add("go_memstats_alloc_bytes_total NaN\ngo_memstats_mallocs_total +Inf\n")
	f.Add("# HELP x\ngo_memstats_mallocs_total\n")
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = parseMetricsAllocs(strings.NewReader(s)) // unsigned: only a panic is wrong
	})
}

func FuzzParseRedisInfo(f *testing.F) {
	f.Add("used_cpu_sys:1.25\r\nused_cpu_user:0.5\r\ntotal_commands_processed:42\r\nused_memory:1048576\r\ncmdstat_evalsha:calls=5,usec=1\r\n")
	f.Add("used_cpu_sys:NaN\r\nused_cpu_user:Inf\r\ntotal_commands_processed:1\r\nused_memory:1\r\n")
	f.Add("cmdstat_eval:usec=1\r\n")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseRedisInfo(s)
		if err == nil && (c.cpu < 0 || c.commands < 0 || c.memory < 0 || c.scripts < 0) {
			t.Fatalf("negative counter %+v", c)
		}
	})
}

func FuzzReadEvent(f *testing.F) {
	f.Add([]byte("event: a\ndata: {}\n\nevent: message_stop\ndata: {}\n\n"))
	f.Add([]byte("event: a\r\ndata: {\r\n"))
	f.Add([]byte(": keepalive\n\n\n\ndata: x\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(b), 16)
		// Every call consumes at least one byte or ends: bounded by the input.
		for range len(b) + 1 {
			if _, err := readEvent(br); err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, errCutEvent) {
					t.Fatalf("readEvent: %v", err)
				}
				return
			}
		}
		t.Fatalf("readEvent did not end on %d bytes", len(b))
	})
}
