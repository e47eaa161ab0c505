package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"gatekeeper/internal/redistest"
)

// TestMain lets the test binary be the bare proxy too: run starts its own
// executable with the bare subcommand.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == bareCommand {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		err := runBare(ctx, os.Args[2:], os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bare:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// tinyArgs run every scenario at the smallest settings: one round each.
var tinyArgs = []string{"-duration", "150ms", "-rounds", "1", "-flat-rounds", "1", "-conns", "4", "-streams", "2",
	"-events", "5", "-deep-turns", "6", "-deep-trajectories", "2", "-records", "40", "-subscribers", "2", "-trace-ratio", "1"}

// TestRunTiny runs the whole program on the memory store at tiny settings
// and checks that the report has every row with figures in it, that nothing
// failed, and that every process it started has stopped. Figures are not
// checked: they depend on the machine.
func TestRunTiny(t *testing.T) {
	runTiny(t, tinyArgs)
}

// TestRunTinyRedis is TestRunTiny on a real redis-server (skipped without
// one, failed without one under CI=true).
func TestRunTinyRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	runTiny(t, append([]string{"-redis", srv.URL}, tinyArgs...))
}

func runTiny(t *testing.T, args []string) {
	// What the test started before (a redis-server's log reader) ends
	// with the test's cleanup.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, args, &stdout, &stderr)
	out := stdout.String()
	if err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	pids := regexp.MustCompile(`started (\w+) \(pid (\d+)\)`).FindAllStringSubmatch(stderr.String(), -1)
	if len(pids) != 2 {
		t.Errorf("started %d processes, want gatekeeper and bare: %s", len(pids), stderr.String())
	}
	for _, m := range pids {
		pid, _ := strconv.Atoi(m[2])
		if !strings.Contains(stderr.String(), fmt.Sprintf("stopped %s (pid %d)", m[1], pid)) {
			t.Errorf("%s (pid %d) was not stopped", m[1], pid)
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) still exists: kill 0 = %v", m[1], pid, err)
		}
	}
	t.Logf("report:\n%s", out)
	rows := tableRows(t, out)
	want := []string{
		"small turns c=4: turns/s",
		"small turns c=4: process CPU per turn",
		"small turns c=4: heap allocated per turn",
		"small turns c=4: latency p50",
		"small turns c=4: latency p99",
		"small turns c=4: RSS after the rounds",
		"small turns c=1: turns/s",
		"small turns c=1: latency p99",
		"5-delta streams c=2: streams/s",
		"5-delta streams c=2: process CPU per stream",
		"5-delta streams c=2: heap allocated per stream",
		"5-delta streams c=2: time to first event p50",
		"5-delta streams c=2: time to first event p99",
		"5-delta streams c=2: RSS after the rounds",
		"turns 4–6 of 2 trajectories vs turns 1–3",
		"small turns c=4 with 40 records stored vs before",
		"small turns c=4 with 2 stream subscribers vs none",
		"gatekeeper RSS per idle record",
		"records made / errors",
	}
	if slices.Contains(args, "-redis") {
		want = append(want, "small turns c=4: redis-server CPU per turn", "small turns c=4: Redis scripts run per turn",
			"small turns c=4: Redis commands per turn (scripts' own calls included)",
			"small turns c=4: gatekeeper + redis-server CPU per turn", "Redis used_memory per idle record")
	}
	for _, figure := range want {
		cells, ok := rows[figure]
		if !ok {
			t.Errorf("no row %q in\n%s", figure, out)
			continue
		}
		// Gatekeeper's figure is there; the CPU figures may read 0 µs
		// at 10 ms resolution, but never n/a.
		if c := cells[0]; c == "" || c == "n/a" {
			t.Errorf("row %q: gatekeeper's cell is %q: %v", figure, c, cells)
		}
	}
	for _, figure := range []string{"small turns c=4: turns completed / errors", "small turns c=1: turns completed / errors",
		"5-delta streams c=2: streams completed / errors"} {
		for i, cell := range rows[figure][:2] {
			if !strings.HasSuffix(cell, " / 0") || strings.HasPrefix(cell, "0 /") {
				t.Errorf("row %q, target %d: %q, want some completed and 0 errors", figure, i, cell)
			}
		}
	}
	if c := rows["records made / errors"]; len(c) != 1 || c[0] != "40 / 0" {
		t.Errorf("records made = %v, want 40 / 0", c)
	}
	if !regexp.MustCompile(`Events each stream subscriber read: [1-9][0-9]*, [1-9][0-9]*\.`).MatchString(out) {
		t.Errorf("a subscriber read no events:\n%s", out)
	}
}

// tableRows maps each row's first cell to its other cells.
func tableRows(t *testing.T, out string) map[string][]string {
	t.Helper()
	rows := map[string][]string{}
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "| ") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if _, dup := rows[cells[0]]; dup && cells[0] != "---" && cells[0] != "figure" {
			t.Errorf("row %q printed twice", cells[0])
		}
		rows[cells[0]] = cells[1:]
	}
	return rows
}

func TestReadEvent(t *testing.T) {
	cases := []struct {
		name   string
		in     string
		names  []string
		ending error
	}{
		{"two events", "event: a\ndata: {}\n\nevent: b\ndata: {}\n\n", []string{"a", "b"}, io.EOF},
		{"crlf", "event: a\r\ndata: {}\r\n\r\n", []string{"a"}, io.EOF},
		{"blank lines between events", "\n\nevent: a\ndata: 1\n\n\n\ndata: 2\n\n", []string{"a", ""}, io.EOF},
		{"no space after colon", "event:message_stop\ndata: {}\n\n", []string{"message_stop"}, io.EOF},
		{"cut inside an event", "event: a\ndata: {}\n\nevent: b\ndata: {", []string{"a"}, errCutEvent},
		{"cut before the blank line", "event: a\ndata: {}\n", nil, errCutEvent},
		{"data line longer than the buffer", "event: big\ndata: " + strings.Repeat("x", 40<<10) + "\n\nevent: c\ndata: {}\n\n", []string{"big", "c"}, io.EOF},
		{"empty stream", "", nil, io.EOF},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReaderSize(strings.NewReader(tc.in), 16<<10)
			var got []string
			var err error
			for range 10 {
				var name string
				name, err = readEvent(br)
				if err != nil {
					break
				}
				got = append(got, name)
			}
			if strings.Join(got, ",") != strings.Join(tc.names, ",") || len(got) != len(tc.names) {
				t.Errorf("events %q, want %q", got, tc.names)
			}
			if !errors.Is(err, tc.ending) {
				t.Errorf("ended with %v, want %v", err, tc.ending)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	cases := []struct {
		name string
		in   []time.Duration
		q    float64
		want time.Duration
		ok   bool
	}{
		{"empty", nil, 0.5, 0, false},
		{"one", ms(7), 0.99, 7 * time.Millisecond, true},
		{"median of odd count", ms(5, 1, 3), 0.5, 3 * time.Millisecond, true},
		{"median of even count is the lower", ms(4, 1, 3, 2), 0.5, 2 * time.Millisecond, true},
		{"p99 of 100", ms(100, 99, 98, 97, 96, 95, 94, 93, 92, 91, 90, 89, 88, 87, 86, 85, 84, 83, 82, 81, 80, 79, 78, 77, 76, 75, 74,
			73, 72, 71, 70, 69, 68, 67, 66, 65, 64, 63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, 47, 46, 45, 44, 43,
			42, 41, 40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12,
			11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 0.99, 99 * time.Millisecond, true},
		{"max", ms(2, 9, 4), 1, 9 * time.Millisecond, true},
		{"negative delays sort first", ms(-1, 2, -3), 0.5, -1 * time.Millisecond, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := percentile(tc.in, tc.q)
			if got != tc.want || ok != tc.ok {
				t.Errorf("percentile(q=%v) = %v, %v; want %v, %v", tc.q, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestParseFlags(t *testing.T) {
	cases := []struct {
		name string
		args []string
		ok   bool
	}{
		{"defaults", nil, true},
		{"all set", []string{"-duration", "1s", "-conns", "2", "-streams", "3", "-events", "4", "-event-delay", "0s", "-records", "5",
			"-rounds", "1", "-flat-rounds", "1", "-deep-turns", "10", "-deep-trajectories", "2", "-subscribers", "1", "-trace-ratio", "0"}, true},
		{"one scenario", []string{"-run", "deep"}, true},
		{"scenarios", []string{"-run", "turns, streams,turns"}, true},
		{"unknown scenario", []string{"-run", "turns,fast"}, false},
		{"redis", []string{"-redis", "redis://127.0.0.1:1/0"}, true},
		{"zero duration", []string{"-duration", "0s"}, false},
		{"zero rounds", []string{"-rounds", "0"}, false},
		{"zero conns", []string{"-conns", "0"}, false},
		{"too many conns", []string{"-conns", "100000"}, false},
		{"one deep turn", []string{"-deep-turns", "1"}, false},
		{"trace ratio above 1", []string{"-trace-ratio", "2"}, false},
		{"negative event delay", []string{"-event-delay", "-1ms"}, false},
		{"event delay past the mock's bound", []string{"-event-delay", "11m"}, false},
		{"stray argument", []string{"now"}, false},
		{"unknown flag", []string{"-fast"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseFlags(tc.args, io.Discard)
			if (err == nil) != tc.ok {
				t.Errorf("parseFlags(%q) = %v, want ok=%v", tc.args, err, tc.ok)
			}
		})
	}
}

func TestParseFlagsScenarios(t *testing.T) {
	p, err := parseFlags([]string{"-run", "streams, turns,streams"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.scenarios, ","); got != "streams,turns" {
		t.Errorf("scenarios %q, want streams,turns", got)
	}
	if p.runs(runDeep) || !p.runs(runTurns) {
		t.Errorf("runs(deep)=%t runs(turns)=%t", p.runs(runDeep), p.runs(runTurns))
	}
}
