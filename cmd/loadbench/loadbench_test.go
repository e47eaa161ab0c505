package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestRunTiny runs the whole program at tiny settings and checks that the
// report has every row, that nothing failed, and that everything it started
// has stopped. Figures are not checked: they depend on the machine.
func TestRunTiny(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	args := []string{"-duration", "200ms", "-conns", "4", "-streams", "8", "-events", "5", "-event-delay", "5ms", "-records", "200"}
	if err := run(ctx, args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"-duration 200ms -rounds 4 -conns 4 -streams 8 -events 5 -event-delay 5ms -records 200",
		"runtime.NumCPU()=", "GOMAXPROCS=",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	rows := tableRows(t, out)
	for _, figure := range []string{
		"small turns: requests/s",
		"small turns: process CPU per turn",
		"small turns: heap allocated per turn",
		"small turns: latency p50",
		"small turns: latency p99",
		"streams: time to first event p50",
		"streams: time to first event p99",
		"streams: per-event delay p50",
		"streams: per-event delay p99",
		"streams: per-event delay max",
		"streams: per-event delay p99, events after the first 2",
		"streams: process CPU per event",
		"streams: heap allocated per event",
		"open stream: heap (HeapAlloc) per stream",
		"open stream: heap spans (HeapInuse) per stream",
		"open stream: goroutines per stream",
		"idle trajectory record: heap (HeapAlloc) per record",
		"idle trajectory record: heap spans (HeapInuse) per record",
		"small turns: completed",
		"small turns: replies from a sibling thread (<id>~N)",
		"streams: events timed",
	} {
		cells, ok := rows[figure]
		if !ok {
			t.Errorf("no row %q", figure)
			continue
		}
		if len(cells) != 5 {
			t.Errorf("row %q has %d cells after the figure, want 5: %v", figure, len(cells), cells)
			continue
		}
		// Target and met are empty where there is no target.
		for _, i := range []int{0, 3, 4} {
			if c := cells[i]; c == "" || c == "n/a" {
				t.Errorf("row %q: cell %d is %q: %v", figure, i+2, c, cells)
			}
		}
	}
	for _, figure := range []string{
		"small turns: errors",
		"streams: errors",
		"streams: truncated (no message_stop)",
		"open stream: errors",
		"open stream: truncated (no message_stop)",
	} {
		cells := rows[figure]
		if len(cells) != 5 || cells[3] != "0" || cells[4] != "0" {
			t.Errorf("row %q = %v, want 0 for both targets", figure, cells)
		}
	}
	if cells := rows["idle trajectory record: errors"]; len(cells) != 5 || cells[4] != "0" {
		t.Errorf("record errors = %v, want 0", cells)
	}
	if cells := rows["open stream: streams open at the sample"]; len(cells) != 5 || cells[3] != "8/8" || cells[4] != "8/8" {
		t.Errorf("open streams at the sample = %v, want 8/8 for both", cells)
	}
	if cells := rows["streams: events timed"]; len(cells) == 5 && cells[3] != cells[4] {
		t.Errorf("events timed differ between targets: %v", cells)
	}
}

// tableRows maps each row's figure to its other cells: comparison, target,
// met, bare, gatekeeper.
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
		if _, dup := rows[cells[0]]; dup {
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
		{"all set", []string{"-duration", "1s", "-conns", "2", "-streams", "3", "-events", "4", "-event-delay", "0s", "-records", "5", "-rounds", "1"}, true},
		{"key limits off", []string{"-redis", "redis://127.0.0.1:1/0", "-key-limits=false"}, true},
		{"zero duration", []string{"-duration", "0s"}, false},
		{"zero rounds", []string{"-rounds", "0"}, false},
		{"zero conns", []string{"-conns", "0"}, false},
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

// TestGate checks the mock's wait without timing it: an hour-long wait
// returns nil only when a released gate cuts it; otherwise it lasts until
// its context is canceled.
func TestGate(t *testing.T) {
	cases := []struct {
		name    string
		prepare func(g *gate)
		want    error
	}{
		{"disarmed waits its time", func(*gate) {}, context.Canceled},
		{"armed waits until released", func(g *gate) { g.arm() }, context.Canceled},
		{"released gate cuts the wait", func(g *gate) { g.arm(); g.release() }, nil},
		{"release twice is harmless", func(g *gate) { g.arm(); g.release(); g.release() }, nil},
		{"disarmed after release waits again", func(g *gate) { g.arm(); g.release(); g.disarm() }, context.Canceled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := &gate{}
			tc.prepare(g)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.want != nil {
				cancel()
			}
			done := make(chan error, 1)
			go func() { done <- g.sleep(ctx, time.Hour) }()
			select {
			case err := <-done:
				if !errors.Is(err, tc.want) {
					t.Fatalf("sleep = %v, want %v", err, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the released gate did not cut the wait")
			}
		})
	}
}
