package main

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Targets gatekeeper is held to against the bare proxy.
const (
	minThroughputRatio = 0.8
	maxAddedEventP99   = time.Millisecond
	maxRecordBytes     = 2 << 10
)

// report holds every figure of a run.
type report struct {
	p        params
	cpus     int
	maxProcs int
	turns    [2]turnStats
	streams  [2]streamStats
	held     [2]holdStats
	records  recordStats
}

// failures counts errors and cut streams over all phases; any is a failed run.
func (r *report) failures() int {
	n := r.records.errs
	for i := range 2 {
		n += r.turns[i].errs + r.streams[i].errs + r.streams[i].truncated + r.held[i].errs + r.held[i].truncated
	}
	return n
}

// row is one line of the table: the comparison first, then the absolute
// figures it comes from.
type row struct {
	figure, compare, target, met, bare, gk string
}

func (r *report) rows() []row {
	var rows []row
	add := func(x row) { rows = append(rows, x) }
	none := "—"

	tb, tg := &r.turns[bareIdx], &r.turns[gkIdx]
	ratio := math.NaN()
	if tb.rate() > 0 {
		ratio = tg.rate() / tb.rate()
	}
	add(row{"small turns: requests/s", fmt.Sprintf("%.3f× (gatekeeper/bare)", ratio), fmt.Sprintf("≥ %.1f", minThroughputRatio),
		met(ratio >= minThroughputRatio), fmt.Sprintf("%.0f", tb.rate()), fmt.Sprintf("%.0f", tg.rate())})
	add(cpuRow("small turns: process CPU per turn", tb.cost, tb.ok+tb.errs, tg.cost, tg.ok+tg.errs))
	add(allocRow("small turns: heap allocated per turn", tb.cost, tb.ok+tb.errs, tg.cost, tg.ok+tg.errs))
	for _, q := range []float64{0.50, 0.99} {
		add(durationRow(fmt.Sprintf("small turns: latency p%.0f", q*100), tb.lat, tg.lat, q, 0))
	}

	sb, sg := &r.streams[bareIdx], &r.streams[gkIdx]
	for _, q := range []float64{0.50, 0.99} {
		add(durationRow(fmt.Sprintf("streams: time to first event p%.0f", q*100), sb.ttfb, sg.ttfb, q, 0))
	}
	add(durationRow("streams: per-event delay p50", sb.delays, sg.delays, 0.50, 0))
	add(durationRow("streams: per-event delay p99", sb.delays, sg.delays, 0.99, maxAddedEventP99))
	add(durationRow("streams: per-event delay max", sb.delays, sg.delays, 1, 0))
	add(durationRow(fmt.Sprintf("streams: per-event delay p99, events after the first %d", startEvents), sb.later, sg.later, 0.99, 0))
	add(cpuRow("streams: process CPU per event", sb.cost, len(sb.delays), sg.cost, len(sg.delays)))
	add(allocRow("streams: heap allocated per event", sb.cost, len(sb.delays), sg.cost, len(sg.delays)))

	hb, hg := &r.held[bareIdx], &r.held[gkIdx]
	add(row{"open stream: heap (HeapAlloc) per stream", bytesSigned(hg.heapPer - hb.heapPer), "", "", bytesOf(hb.heapPer), bytesOf(hg.heapPer)})
	add(row{"open stream: heap spans (HeapInuse) per stream", bytesSigned(hg.inusePer - hb.inusePer), "", "", bytesOf(hb.inusePer), bytesOf(hg.inusePer)})
	add(row{"open stream: goroutines per stream", fmt.Sprintf("%+.2f", hg.goroutinesPer-hb.goroutinesPer), "", "",
		fmt.Sprintf("%.2f", hb.goroutinesPer), fmt.Sprintf("%.2f", hg.goroutinesPer)})

	if r.p.redisURL != "" {
		add(row{"small turns: Redis round trips per turn", perOf(tg.rtt, tg.ok+tg.errs), "", "", none, fmt.Sprint(tg.rtt)})
		add(row{"streams: Redis round trips per stream (each a new run)", perOf(sg.rtt, sg.streams), "", "", none, fmt.Sprint(sg.rtt)})
		if tg.redisCPUErr != nil {
			add(row{"small turns: redis-server CPU per turn", "n/a: " + tg.redisCPUErr.Error(), "", "", none, "n/a"})
		} else if n := tg.ok + tg.errs; n > 0 {
			add(row{"small turns: redis-server CPU per turn", none, "", "", none, usOf(tg.redisCPU / time.Duration(n))})
			// The whole cost of a turn on this machine: gatekeeper's
			// process and the redis-server it waits on.
			both := tg.cost
			both.cpu += tg.redisCPU
			add(cpuRow("small turns: process CPU + redis-server CPU per turn", tb.cost, tb.ok+tb.errs, both, n))
		}
	}

	rc := &r.records
	add(row{"idle trajectory record: heap (HeapAlloc) per record", bytesOf(rc.perRecord), fmt.Sprintf("< %d KiB", maxRecordBytes>>10),
		met(rc.perRecord < maxRecordBytes), none, bytesOf(rc.perRecord)})
	add(row{"idle trajectory record: heap spans (HeapInuse) per record", bytesOf(rc.inusePer), "", "", none, bytesOf(rc.inusePer)})

	add(row{"small turns: completed", none, "", "", fmt.Sprint(tb.ok), fmt.Sprint(tg.ok)})
	add(countRow("small turns: errors", tb.errs, tg.errs))
	add(row{"small turns: replies from a sibling thread (<id>~N)", none, "", "", none, fmt.Sprint(tg.forks)})
	add(row{"streams: events timed", none, "", "", fmt.Sprint(len(sb.delays)), fmt.Sprint(len(sg.delays))})
	add(countRow("streams: errors", sb.errs, sg.errs))
	add(countRow("streams: truncated (no message_stop)", sb.truncated, sg.truncated))
	add(row{"open stream: streams open at the sample", none, "", "", fmt.Sprintf("%d/%d", hb.open, hb.streams), fmt.Sprintf("%d/%d", hg.open, hg.streams)})
	add(countRow("open stream: errors", hb.errs, hg.errs))
	add(countRow("open stream: truncated (no message_stop)", hb.truncated, hg.truncated))
	add(row{"idle trajectory record: errors", none, "0", met(rc.errs == 0), none, fmt.Sprint(rc.errs)})
	return rows
}

// perOf is n per unit, to two decimals.
func perOf(n int64, units int) string {
	if units == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", float64(n)/float64(units))
}

// durationRow compares a percentile of two samples; limit, when set, is
// the most gatekeeper may add.
func durationRow(figure string, bare, gk []time.Duration, q float64, limit time.Duration) row {
	b, bok := percentile(bare, q)
	g, gok := percentile(gk, q)
	x := row{figure: figure, compare: "n/a", bare: "n/a", gk: "n/a"}
	if bok {
		x.bare = msOf(b)
	}
	if gok {
		x.gk = msOf(g)
	}
	if bok && gok {
		x.compare = fmt.Sprintf("%+.3f ms added", float64(g-b)/float64(time.Millisecond))
	}
	if limit > 0 {
		x.target = fmt.Sprintf("< %s added", limit)
		x.met = met(bok && gok && g-b < limit)
	}
	return x
}

// cpuRow compares process CPU time per unit of work.
func cpuRow(figure string, bare cost, nb int, gk cost, ng int) row {
	b, bok := bare.cpuPer(nb)
	g, gok := gk.cpuPer(ng)
	x := row{figure: figure, compare: "n/a", bare: "n/a", gk: "n/a"}
	if bok {
		x.bare = usOf(b)
	}
	if gok {
		x.gk = usOf(g)
	}
	if bok && gok && b > 0 {
		x.compare = fmt.Sprintf("%.3f× (%+.1f µs)", float64(g)/float64(b), float64(g-b)/float64(time.Microsecond))
	}
	return x
}

// allocRow compares heap bytes and objects allocated per unit of work.
func allocRow(figure string, bare cost, nb int, gk cost, ng int) row {
	bb, bo, bok := bare.allocPer(nb)
	gb, gob, gok := gk.allocPer(ng)
	x := row{figure: figure, compare: "n/a", bare: "n/a", gk: "n/a"}
	if bok {
		x.bare = fmt.Sprintf("%.0f B, %.1f objects", bb, bo)
	}
	if gok {
		x.gk = fmt.Sprintf("%.0f B, %.1f objects", gb, gob)
	}
	if bok && gok {
		x.compare = fmt.Sprintf("%+.0f B, %+.1f objects", gb-bb, gob-bo)
	}
	return x
}

func countRow(figure string, bare, gk int) row {
	return row{figure, "—", "0", met(bare == 0 && gk == 0), fmt.Sprint(bare), fmt.Sprint(gk)}
}

func met(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

// percentile is the nearest-rank q-quantile (q=1: the maximum). It sorts
// ds in place.
func percentile(ds []time.Duration, q float64) (time.Duration, bool) {
	if len(ds) == 0 {
		return 0, false
	}
	slices.Sort(ds)
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)], true
}

func usOf(d time.Duration) string {
	return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
}

func msOf(d time.Duration) string {
	return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond))
}

func bytesOf(n float64) string { return fmt.Sprintf("%.0f B (%.2f KiB)", n, n/1024) }

func bytesSigned(n float64) string { return fmt.Sprintf("%+.0f B (%+.2f KiB)", n, n/1024) }

// write prints the parameters, the table, and what went wrong if anything.
func (r *report) write(w io.Writer) error {
	var sb strings.Builder
	p := r.p
	store := "memory"
	if p.redisURL != "" {
		store = fmt.Sprintf("redis, -settle-window %s -key-limits=%t (the idle record rows then count gatekeeper's process heap only: records live in Redis)",
			p.settleWindow, p.keyLimits)
	}
	fmt.Fprintf(&sb, "Parameters: -duration %s -rounds %d -conns %d -streams %d -events %d -event-delay %s -records %d -watchdog=%t; store %s\n\n",
		p.duration, p.rounds, p.conns, p.streams, p.events, p.eventDelay, p.records, p.watchdog, store)
	fmt.Fprintf(&sb, "Machine: runtime.NumCPU()=%d, GOMAXPROCS=%d, %s %s/%s; client, mock and both proxies share this one process.\n\n",
		r.cpus, r.maxProcs, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	sb.WriteString("| figure | gatekeeper vs bare | target | met | bare | gatekeeper |\n")
	sb.WriteString("|---|---:|---|---|---:|---:|\n")
	for _, x := range r.rows() {
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s | %s |\n", x.figure, x.compare, x.target, x.met, x.bare, x.gk)
	}
	var errs []string
	for i, name := range []string{"bare", "gatekeeper"} {
		for _, e := range []struct{ phase, msg string }{
			{"small turns", r.turns[i].firstErr}, {"streams", r.streams[i].firstErr}, {"open streams", r.held[i].firstErr},
		} {
			if e.msg != "" {
				errs = append(errs, fmt.Sprintf("- %s, %s: first error: %s", name, e.phase, e.msg))
			}
		}
	}
	if r.records.firstErr != "" {
		errs = append(errs, "- gatekeeper, records: first error: "+r.records.firstErr)
	}
	if len(errs) > 0 {
		sb.WriteString("\n" + strings.Join(errs, "\n") + "\n")
	}
	_, err := io.WriteString(w, sb.String())
	return err
}
