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

// report holds every figure of a run.
type report struct {
	p                  params
	commit             string
	loadStart, loadEnd string
	turns, c1, streams [2]stats
	turnsRSS           [2]int64
	streamsRSS         [2]int64
	deep               deepStats
	records            recordStats
	subs               subscriberStats
	done               []string // the scenarios that finished
}

func (r *report) did(s string) bool { return slices.Contains(r.done, s) }

// failures counts failed requests and streams, and subscribers that read
// nothing; any is a failed run.
func (r *report) failures() int {
	n := 0
	for i := range 2 {
		for _, s := range []stats{r.turns[i], r.c1[i], r.streams[i], r.deep.early[i], r.deep.late[i],
			r.records.before[i], r.records.after[i], r.subs.before[i], r.subs.after[i]} {
			n += s.errs
		}
	}
	n += r.deep.drive.errs + r.records.fill.errs
	for i, err := range r.subs.errs {
		if err != nil || r.subs.events[i] == 0 {
			n++
		}
	}
	return n
}

// row is one line of a table.
type row []string

func table(sb *strings.Builder, head row, rows []row) {
	line := func(x row) { sb.WriteString("| " + strings.Join(x, " | ") + " |\n") }
	line(head)
	sep := make(row, len(head))
	for i := range sep {
		sep[i] = "---:"
	}
	sep[0] = "---"
	line(sep)
	for _, x := range rows {
		line(x)
	}
}

// ratio is a/b as "0.87×", or n/a.
func ratio(a, b float64) string {
	if b <= 0 || a < 0 || math.IsNaN(a) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// cpuPer is the process CPU per unit, or false when unknown.
func cpuPer(s stats) (time.Duration, bool) {
	if s.cost.err != nil || s.ok == 0 {
		return 0, false
	}
	return s.cost.cpu / time.Duration(s.ok), true
}

func usOrNA(d time.Duration, ok bool) string {
	if !ok {
		return "n/a"
	}
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
}

func durRatio(a time.Duration, aok bool, b time.Duration, bok bool) string {
	if !aok || !bok {
		return "n/a"
	}
	return ratio(float64(a), float64(b))
}

// allocsPer is "B, objects" per unit.
func allocsPer(s stats) string {
	if s.cost.err != nil || s.ok == 0 {
		return "n/a"
	}
	n := float64(s.ok)
	return fmt.Sprintf("%.0f B, %.0f objects", float64(s.cost.allocs.bytes)/n, float64(s.cost.allocs.objects)/n)
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

func msOf(d time.Duration) string {
	return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond))
}

// latencyRow compares a percentile of two samples: what gatekeeper adds.
func latencyRow(figure string, gk, bare []time.Duration, q float64) row {
	g, gok := percentile(gk, q)
	b, bok := percentile(bare, q)
	x := row{figure, "n/a", "n/a", "n/a"}
	if gok {
		x[1] = msOf(g)
	}
	if bok {
		x[2] = msOf(b)
	}
	if gok && bok {
		x[3] = fmt.Sprintf("%+.3f ms", float64(g-b)/float64(time.Millisecond))
	}
	return x
}

func mib(n int64) string {
	if n < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// loadRows are the rows of one workload (turns or streams) per target.
func (r *report) loadRows(name, unit string, s [2]stats, rss [2]int64, stream bool) []row {
	g, b := s[gkIdx], s[bareIdx]
	gc, gok := cpuPer(g)
	bc, bok := cpuPer(b)
	rows := []row{
		{name + ": " + unit + "s/s", fmt.Sprintf("%.0f", g.rate()), fmt.Sprintf("%.0f", b.rate()), ratio(g.rate(), b.rate())},
		{name + ": process CPU per " + unit, usOrNA(gc, gok), usOrNA(bc, bok), durRatio(gc, gok, bc, bok)},
	}
	if r.p.redisURL != "" && g.ok > 0 && g.cost.err == nil {
		rc := g.cost.redisCPU / time.Duration(g.ok)
		rows = append(rows,
			row{name + ": redis-server CPU per " + unit, usOrNA(rc, true), "—", "—"},
			row{name + ": gatekeeper + redis-server CPU per " + unit, usOrNA(gc+rc, gok), usOrNA(bc, bok), durRatio(gc+rc, gok, bc, bok)},
			row{name + ": Redis scripts run per " + unit, fmt.Sprintf("%.2f", float64(g.cost.redisScripts)/float64(g.ok)), "—", "—"},
			row{name + ": Redis commands per " + unit + " (scripts' own calls included)", fmt.Sprintf("%.1f", float64(g.cost.redisCmds)/float64(g.ok)), "—", "—"},
		)
	}
	rows = append(rows, row{name + ": heap allocated per " + unit, allocsPer(g), allocsPer(b), "—"})
	if stream {
		rows = append(rows,
			latencyRow(name+": time to first event p50", g.ttfb, b.ttfb, 0.5),
			latencyRow(name+": time to first event p99", g.ttfb, b.ttfb, 0.99),
			latencyRow(name+": whole stream p50", g.lat, b.lat, 0.5),
		)
	} else {
		rows = append(rows,
			latencyRow(name+": latency p50", g.lat, b.lat, 0.5),
			latencyRow(name+": latency p99", g.lat, b.lat, 0.99),
		)
	}
	if g.ok > 0 && g.cost.err == nil {
		rows = append(rows, row{name + ": log bytes per " + unit, fmt.Sprintf("%.0f", float64(g.cost.logBytes)/float64(g.ok)), "—", "—"})
	}
	if rss != [2]int64{} {
		rows = append(rows, row{name + ": RSS after the rounds", mib(rss[gkIdx]), mib(rss[bareIdx]), ratio(float64(rss[gkIdx]), float64(rss[bareIdx]))})
	}
	rows = append(rows, row{name + ": " + unit + "s completed / errors", fmt.Sprintf("%d / %d", g.ok, g.errs), fmt.Sprintf("%d / %d", b.ok, b.errs), "—"})
	if !stream {
		rows = append(rows, row{name + ": replies from a sibling thread (<id>/~N)", fmt.Sprint(g.forks), "—", "—"})
	}
	return rows
}

// flatRow compares CPU per turn before and after a change of state, for
// gatekeeper and the bare proxy (whose change is the machine's noise).
func flatRow(figure string, before, after [2]stats) row {
	x := row{figure}
	for _, i := range []int{gkIdx, bareIdx} {
		b, bok := cpuPer(before[i])
		a, aok := cpuPer(after[i])
		x = append(x, usOrNA(b, bok), usOrNA(a, aok), durRatio(a, aok, b, bok))
	}
	gb, gbok := cpuPer(before[gkIdx])
	bb, bbok := cpuPer(before[bareIdx])
	ga, gaok := cpuPer(after[gkIdx])
	ba, baok := cpuPer(after[bareIdx])
	if gbok && bbok && gaok && baok && bb > 0 && ba > 0 && gb > 0 {
		x = append(x, fmt.Sprintf("%.2f×", (float64(ga)/float64(ba))/(float64(gb)/float64(bb))))
	} else {
		x = append(x, "n/a")
	}
	return x
}

// write prints the parameters and the tables.
func (r *report) write(w io.Writer) error {
	var sb strings.Builder
	p := r.p
	store := "memory"
	if p.redisURL != "" {
		store = "redis"
	}
	fmt.Fprintf(&sb, "Command: `go run ./cmd/loadbench %s`\n\n", strings.Join(p.args, " "))
	fmt.Fprintf(&sb, "gatekeeper built from %s; store %s; scenarios finished %s; -duration %s per round and target, -rounds %d, -flat-rounds %d, -conns %d, -streams %d, -events %d, -event-delay %s, -trace-ratio %g, -tenant-limits=%t.\n\n",
		r.commit, store, strings.Join(r.done, ","), p.duration, p.rounds, p.flatRounds, p.conns, p.streams, p.events, p.eventDelay, p.traceRatio, p.tenantLimits)
	fmt.Fprintf(&sb, "Machine: %d CPUs, %s %s/%s; load average %s at the start, %s at the end. Each proxy is its own process; the load client and the mock share this one.\n\n",
		runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH, r.loadStart, r.loadEnd)

	var rows []row
	if r.did(runTurns) {
		rows = append(rows, r.loadRows(fmt.Sprintf("small turns c=%d", p.conns), "turn", r.turns, r.turnsRSS, false)...)
	}
	if r.did(runC1) {
		rows = append(rows, r.loadRows("small turns c=1", "turn", r.c1, [2]int64{}, false)...)
	}
	if r.did(runStreams) {
		rows = append(rows, r.loadRows(fmt.Sprintf("%d-delta streams c=%d", p.events, p.streams), "stream", r.streams, r.streamsRSS, true)...)
	}
	if len(rows) > 0 {
		table(&sb, row{"figure", "gatekeeper", "bare", "gatekeeper vs bare"}, rows)
		sb.WriteString("\n")
	}

	var flat []row
	if r.did(runDeep) {
		flat = append(flat, flatRow(fmt.Sprintf("turns %d–%d of %d trajectories vs turns 1–%d", r.deep.turns-r.deep.window+1, r.deep.turns, p.deepTrajectories, r.deep.window),
			r.deep.early, r.deep.late))
	}
	if r.did(runRecords) {
		flat = append(flat, flatRow(fmt.Sprintf("small turns c=%d with %d records stored vs before", p.conns, r.records.records), r.records.before, r.records.after))
	}
	if r.did(runSubscribers) {
		flat = append(flat, flatRow(fmt.Sprintf("small turns c=%d with %d stream subscribers vs none", p.conns, r.subs.subscribers), r.subs.before, r.subs.after))
	}
	if len(flat) > 0 {
		sb.WriteString("Flat cost: process CPU per turn before and after (the bare proxy's change is the machine's noise; the last column is gatekeeper's change relative to bare's).\n\n")
		table(&sb, row{"scenario", "gatekeeper before", "after", "change", "bare before", "after", "change", "gatekeeper vs bare change"}, flat)
		sb.WriteString("\n")
	}
	if r.did(runRecords) {
		rc := r.records
		var mem []row
		per := func(a, b int64) string {
			if rc.fill.ok == 0 {
				return "n/a"
			}
			return fmt.Sprintf("%.0f B", float64(b-a)/float64(rc.fill.ok))
		}
		mem = append(mem, row{"gatekeeper RSS before / after", mib(rc.rss0) + " / " + mib(rc.rss1)},
			row{"gatekeeper RSS per idle record", per(rc.rss0, rc.rss1)})
		if p.redisURL != "" {
			mem = append(mem, row{"Redis used_memory before / after", mib(rc.redis0) + " / " + mib(rc.redis1)},
				row{"Redis used_memory per idle record", per(rc.redis0, rc.redis1)})
		}
		fc, fok := cpuPer(rc.fill)
		mem = append(mem, row{"records made / errors", fmt.Sprintf("%d / %d", rc.fill.ok, rc.fill.errs)},
			row{"records made per second", fmt.Sprintf("%.0f", rc.fill.rate())},
			row{"gatekeeper CPU per record made (a trajectory's first turn)", usOrNA(fc, fok)})
		sb.WriteString("Idle records (RSS includes the garbage the collector has not yet returned: an upper bound).\n\n")
		table(&sb, row{"figure", "value"}, mem)
		sb.WriteString("\n")
	}
	if r.did(runSubscribers) {
		var ev []string
		for i, n := range r.subs.events {
			s := fmt.Sprint(n)
			if err := r.subs.errs[i]; err != nil {
				s += " (" + err.Error() + ")"
			}
			ev = append(ev, s)
		}
		fmt.Fprintf(&sb, "Events each stream subscriber read: %s.\n\n", strings.Join(ev, ", "))
	}
	var errs []string
	note := func(what string, s stats) {
		if s.firstErr != "" {
			errs = append(errs, fmt.Sprintf("- %s: %d errors, the first: %s", what, s.errs, s.firstErr))
		}
		if s.cost.err != nil {
			errs = append(errs, fmt.Sprintf("- %s: counters not read: %v", what, s.cost.err))
		}
	}
	for i, name := range []string{"gatekeeper", "bare"} {
		note(name+", small turns", r.turns[i])
		note(name+", small turns c=1", r.c1[i])
		note(name+", streams", r.streams[i])
		note(name+", deep (early)", r.deep.early[i])
		note(name+", deep (late)", r.deep.late[i])
		note(name+", records (before)", r.records.before[i])
		note(name+", records (after)", r.records.after[i])
		note(name+", subscribers (before)", r.subs.before[i])
		note(name+", subscribers (after)", r.subs.after[i])
	}
	note("gatekeeper, deep (between the windows)", r.deep.drive)
	note("gatekeeper, making records", r.records.fill)
	if len(errs) > 0 {
		sb.WriteString(strings.Join(errs, "\n") + "\n")
	}
	_, err := io.WriteString(w, sb.String())
	return err
}
