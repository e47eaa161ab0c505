// Command loadbench measures what users run: it builds gatekeeper with a
// plain `go build`, starts `gatekeeper serve` as its own process with an
// operator's config (live event stream, default log level to a file,
// metrics and sampled traces, a budget on every run, provider-key limits
// that do not bind; the memory store or, with -redis, Redis), and starts a
// bare httputil.ReverseProxy as another process (this binary's hidden
// "bare" subcommand), both in front of the same mock provider, which runs
// in this process with the load client. Rounds alternate gatekeeper and
// bare; each process's CPU (/proc/PID/stat), allocations (gatekeeper's
// /metrics, the bare proxy's runtime/metrics) and resident memory are read
// around each round, so the figures are each proxy's own.
//
//	go run ./cmd/loadbench [-run turns,c1,streams,deep,records,subscribers]
//	    [-duration 2s] [-rounds 4] [-conns 64] [-streams 64] [-events 50]
//	    [-event-delay 0s] [-deep-turns 1000] [-deep-trajectories 16]
//	    [-records 100000] [-subscribers 10] [-flat-rounds 2]
//	    [-redis redis://127.0.0.1:6379/0] [-trace-ratio 0.1] [-watchdog]
//	    [-tenant-limits=false]
//	    [-src DIR] [-keep]
//
// It prints a Markdown report and exits 1 when any request failed, after
// printing it. Every process it starts is stopped by its PID at the end,
// on error and on SIGINT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	if len(os.Args) > 1 && os.Args[1] == bareCommand {
		err = runBare(ctx, os.Args[2:], os.Stdout, os.Stderr)
	} else {
		err = run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	}
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "loadbench:", err)
		}
		os.Exit(1)
	}
}

// The scenarios -run selects, in the order they run.
const (
	runTurns       = "turns"       // small turns, -conns workers
	runC1          = "c1"          // small turns, one worker
	runStreams     = "streams"     // -events-delta streams, -streams workers
	runDeep        = "deep"        // one trajectory's turn -deep-turns against its turn 1
	runRecords     = "records"     // -records idle records: memory, and turns with them stored
	runSubscribers = "subscribers" // turns while -subscribers read the live event stream
)

var allScenarios = []string{runTurns, runC1, runStreams, runDeep, runRecords, runSubscribers}

// params are the knobs of one run.
type params struct {
	scenarios        []string
	duration         time.Duration // one timed round of one target
	rounds           int
	flatRounds       int
	conns            int
	streams          int
	events           int // text deltas per stream
	eventDelay       time.Duration
	deepTurns        int
	deepTrajectories int
	records          int
	subscribers      int
	redisURL         string
	traceRatio       float64
	watchdog         bool
	tenantLimits     bool   // the tenant's spend and trajectory limits (tenants[].limits)
	src              string // the repository gatekeeper is built from
	keep             bool   // keep the temporary directory (config, logs)
	args             []string
}

func (p params) runs(s string) bool { return slices.Contains(p.scenarios, s) }

// maxEventDelay mirrors the mock's own bound on scripted waits.
const maxEventDelay = 10 * time.Minute

// Upper bounds of the counts, so that no flag makes a loop unbounded.
const (
	maxWorkers = 4096
	maxRecords = 10_000_000
	maxDeep    = 1_000_000
)

func parseFlags(args []string, stderr io.Writer) (params, error) {
	p := params{args: args}
	var scenarios string
	fs := flag.NewFlagSet("loadbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&scenarios, "run", strings.Join(allScenarios, ","), "scenarios to run, comma-separated: "+strings.Join(allScenarios, ", "))
	fs.DurationVar(&p.duration, "duration", 2*time.Second, "length of one timed round of one target")
	fs.IntVar(&p.rounds, "rounds", 4, "turns, c1, streams: timed rounds per target, alternating gatekeeper and bare")
	fs.IntVar(&p.flatRounds, "flat-rounds", 2, "records, subscribers: timed rounds per target before and after")
	fs.IntVar(&p.conns, "conns", 64, "small turns: concurrent workers, each on its own trajectory")
	fs.IntVar(&p.streams, "streams", 64, "streams: concurrent workers, each on its own trajectory")
	fs.IntVar(&p.events, "events", 50, "text deltas per stream")
	fs.DurationVar(&p.eventDelay, "event-delay", 0, "wait between stream events at the mock")
	fs.IntVar(&p.deepTurns, "deep-turns", 1000, "deep: turns each trajectory is driven to")
	fs.IntVar(&p.deepTrajectories, "deep-trajectories", 16, "deep: trajectories driven at once, one worker each")
	fs.IntVar(&p.records, "records", 100_000, "records: idle trajectory records created")
	fs.IntVar(&p.subscribers, "subscribers", 10, "subscribers: readers of the live event stream")
	fs.StringVar(&p.redisURL, "redis", "", "gatekeeper's store, event stream and key buckets: this Redis (an empty database, redis://host:port/db)")
	fs.Float64Var(&p.traceRatio, "trace-ratio", 0.1, "share of turns traced and exported (OTLP to a sink in this process); 0: traces off")
	fs.BoolVar(&p.watchdog, "watchdog", false, "turn gatekeeper's loop watchdog on")
	fs.BoolVar(&p.tenantLimits, "tenant-limits", true, "give the tenant spend and trajectory limits that do not bind, as config.yaml's tenant has (false: none)")
	fs.StringVar(&p.src, "src", "", "the repository to build gatekeeper from (default: the module of the working directory)")
	fs.BoolVar(&p.keep, "keep", false, "keep the temporary directory with gatekeeper's config and logs")
	if err := fs.Parse(args); err != nil {
		return params{}, err
	}
	if fs.NArg() > 0 {
		return params{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for s := range strings.SplitSeq(scenarios, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(allScenarios, s) {
			return params{}, fmt.Errorf("-run: unknown scenario %q (want %s)", s, strings.Join(allScenarios, ", "))
		}
		if !slices.Contains(p.scenarios, s) {
			p.scenarios = append(p.scenarios, s)
		}
	}
	switch {
	case p.duration <= 0 || p.duration > time.Hour:
		return params{}, errors.New("-duration must be positive and at most 1h")
	case p.rounds < 1 || p.flatRounds < 1 || p.rounds > 1000 || p.flatRounds > 1000:
		return params{}, errors.New("-rounds and -flat-rounds must be between 1 and 1000")
	case p.conns < 1 || p.streams < 1 || p.deepTrajectories < 1 || p.subscribers < 1 ||
		p.conns > maxWorkers || p.streams > maxWorkers || p.deepTrajectories > maxWorkers || p.subscribers > maxWorkers:
		return params{}, fmt.Errorf("-conns, -streams, -deep-trajectories and -subscribers must be between 1 and %d", maxWorkers)
	case p.events < 1 || p.events > 100_000:
		return params{}, errors.New("-events must be between 1 and 100000")
	case p.records < 1 || p.records > maxRecords:
		return params{}, fmt.Errorf("-records must be between 1 and %d", maxRecords)
	case p.deepTurns < 2 || p.deepTurns > maxDeep:
		return params{}, fmt.Errorf("-deep-turns must be between 2 and %d", maxDeep)
	case p.eventDelay < 0 || p.eventDelay > maxEventDelay:
		return params{}, fmt.Errorf("-event-delay must be between 0 and %s", maxEventDelay)
	case p.traceRatio < 0 || p.traceRatio > 1:
		return params{}, errors.New("-trace-ratio must be between 0 and 1")
	}
	return p, nil
}

// run is the whole program; main only wires the process to it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	p, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	rep := &report{p: p, loadStart: loadAverage()}
	b, err := start(ctx, p, stderr)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := b.close(); err == nil {
			err = cerr
		}
	}()
	rep.commit = sourceCommit(ctx, b.src)
	progress := func(what string) { fmt.Fprintf(stderr, "loadbench: %s (load average %s)\n", what, loadAverage()) }
	steps := []struct {
		name string
		do   func() error
	}{
		{runTurns, func() (err error) {
			rep.turns, err = b.rounds(ctx, p.conns, p.rounds, b.turns("turns"))
			rep.turnsRSS = b.rss()
			return err
		}},
		{runC1, func() (err error) {
			rep.c1, err = b.rounds(ctx, 1, p.rounds, b.turns("c1"))
			return err
		}},
		{runStreams, func() (err error) {
			rep.streams, err = b.rounds(ctx, p.streams, p.rounds, b.streams("streams"))
			rep.streamsRSS = b.rss()
			return err
		}},
		{runDeep, func() (err error) {
			rep.deep, err = b.deepPhase(ctx)
			return err
		}},
		{runRecords, func() (err error) {
			rep.records, err = b.recordsPhase(ctx)
			return err
		}},
		{runSubscribers, func() (err error) {
			rep.subs, err = b.subscribersPhase(ctx)
			return err
		}},
	}
	for _, s := range steps {
		if !p.runs(s.name) {
			continue
		}
		progress(s.name)
		if err := s.do(); err != nil {
			// What finished is still worth reading.
			rep.loadEnd = loadAverage()
			return errors.Join(fmt.Errorf("%s: %w", s.name, err), rep.write(stdout))
		}
		rep.done = append(rep.done, s.name)
	}
	rep.loadEnd = loadAverage()
	if err := rep.write(stdout); err != nil {
		return err
	}
	if n := rep.failures(); n > 0 {
		return fmt.Errorf("%d failed requests or streams (see the report)", n)
	}
	return nil
}

// rss is each target's resident memory now; -1 where it cannot be read.
func (b *bench) rss() [2]int64 {
	var out [2]int64
	for i, tg := range b.targets {
		n, err := procRSS(tg.proc.pid())
		if err != nil {
			n = -1
		}
		out[i] = n
	}
	return out
}
