package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// utime 250 and stime 50 ticks: 3 s.
	const line = "4242 (gate keeper) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 50 0 0 20 0 12 0 100 123456789 2048 18446744073709551615"
	cases := []struct {
		name string
		in   string
		want time.Duration
		ok   bool
	}{
		{"spaces in the name", line, 3 * time.Second, true},
		{"parentheses in the name", strings.Replace(line, "(gate keeper)", "(a) b (c))", 1), 3 * time.Second, true},
		{"no name", "4242 S 1", 0, false},
		{"too short", "4242 (x) S 1 2 3", 0, false},
		{"not a number", strings.Replace(line, " 250 ", " x ", 1), 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatCPU([]byte(tc.in))
			if (err == nil) != tc.ok || got != tc.want {
				t.Fatalf("parseStatCPU = %s, %v; want %s, ok=%t", got, err, tc.want, tc.ok)
			}
		})
	}
}

func TestParseRSS(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want int64
		ok   bool
	}{
		{"present", "Name:\tgatekeeper\nVmPeak:\t  9000 kB\nVmRSS:\t   1234 kB\nThreads:\t8\n", 1234 << 10, true},
		{"absent", "Name:\tgatekeeper\n", 0, false},
		{"no unit", "VmRSS:\t1234\n", 0, false},
		{"not a number", "VmRSS:\tx kB\n", 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseRSS([]byte(tc.in))
			if (err == nil) != tc.ok || got != tc.want {
				t.Fatalf("parseRSS = %d, %v; want %d, ok=%t", got, err, tc.want, tc.ok)
			}
		})
	}
}

// TestOwnProc reads this process's own figures: the parsers agree with
// what the kernel writes.
func TestOwnProc(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc:", err)
	}
	if _, err := procCPU(os.Getpid()); err != nil {
		t.Error(err)
	}
	if n, err := procRSS(os.Getpid()); err != nil || n <= 0 {
		t.Errorf("procRSS = %d, %v", n, err)
	}
}

func TestParseMetricsAllocs(t *testing.T) {
	const expo = "# HELP go_memstats_alloc_bytes_total Total bytes.\n# TYPE go_memstats_alloc_bytes_total counter\n" +
		"go_memstats_alloc_bytes_total 1.2345678e+07\ngo_memstats_alloc_bytes 5000\n" +
		"go_memstats_mallocs_total 98765\ngatekeeper_turns_total{tenant=\"t\"} 3\n"
	got, err := parseMetricsAllocs(strings.NewReader(expo))
	if err != nil || got != (allocs{bytes: 12345678, objects: 98765}) {
		t.Errorf("parseMetricsAllocs = %+v, %v", got, err)
	}
	for _, bad := range []string{
		"go_memstats_alloc_bytes_total 1\n",
		"go_memstats_alloc_bytes_total x\ngo_memstats_mallocs_total 1\n",
		"go_memstats_alloc_bytes_total -1\ngo_memstats_mallocs_total 1\n",
	} {
		if _, err := parseMetricsAllocs(strings.NewReader(bad)); err == nil {
			t.Errorf("parseMetricsAllocs(%q) accepted it", bad)
		}
	}
}
