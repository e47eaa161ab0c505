// Command loadbench measures what gatekeeper costs on top of a bare
// httputil.ReverseProxy, both in front of the same mock provider, in one
// process on loopback. It owns the load (small non-streamed turns, many
// concurrent streams), the clocks it reads (per-event delay from the mock's
// flush to the client's read), the heap and goroutine samples (per open
// stream, per idle trajectory record), and the Markdown report of them.
//
//	go run ./cmd/loadbench [-duration 5s] [-conns 64] [-streams 256] [-events 50]
//	    [-event-delay 20ms] [-records 10000] [-rounds 4] [-cpuprofile FILE] [-redis URL]
//	    [-settle-window 2ms] [-key-limits=false]
//
// It exits 1 when any request failed or any stream was cut, after printing
// the table.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"gatekeeper/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "loadbench:", err)
		}
		os.Exit(1)
	}
}

// params are the knobs of one run.
type params struct {
	duration   time.Duration // small turns, per target, over all rounds
	rounds     int
	conns      int
	streams    int
	events     int // text deltas per stream
	eventDelay time.Duration
	records    int
	redisURL   string
	// settleWindow is gatekeeper's store.settle_window on Redis.
	settleWindow time.Duration
	cpuProfile   string
	watchdog     bool // gatekeeper's loop watchdog on
	// keyLimits puts limits on the provider key with -redis, kept in Redis
	// buckets; off, the Redis path is records and budgets only.
	keyLimits bool
}

// maxEventDelay mirrors the mock's own bound on scripted waits.
const maxEventDelay = 10 * time.Minute

func parseFlags(args []string, stderr io.Writer) (params, error) {
	var p params
	fs := flag.NewFlagSet("loadbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&p.duration, "duration", 5*time.Second, "small non-streamed turns: time spent on each target, over all rounds")
	fs.IntVar(&p.rounds, "rounds", 4, "small turns and streams: timed rounds per target, alternating targets to spread noise")
	fs.IntVar(&p.conns, "conns", 64, "small turns: concurrent workers, each on its own trajectory")
	fs.IntVar(&p.streams, "streams", 256, "concurrent streams per target")
	fs.IntVar(&p.events, "events", 50, "text deltas per stream")
	fs.DurationVar(&p.eventDelay, "event-delay", 20*time.Millisecond, "wait between stream events at the mock")
	fs.IntVar(&p.records, "records", 10000, "trajectory records created to measure an idle record's heap")
	fs.StringVar(&p.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fs.StringVar(&p.redisURL, "redis", "", "gatekeeper's store: this Redis (redis://host:port/db) instead of the memory store")
	fs.DurationVar(&p.settleWindow, "settle-window", config.DefaultSettleWindow,
		"with -redis: gatekeeper's store.settle_window (0: each settle written before its reply ends)")
	fs.BoolVar(&p.watchdog, "watchdog", false, "turn gatekeeper's loop watchdog on (compare with a run without it)")
	fs.BoolVar(&p.keyLimits, "key-limits", true, "with -redis: limits on the provider key, kept in Redis buckets (false: records and budgets only)")
	if err := fs.Parse(args); err != nil {
		return params{}, err
	}
	if fs.NArg() > 0 {
		return params{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case p.duration <= 0:
		return params{}, errors.New("-duration must be positive")
	case p.rounds < 1:
		return params{}, errors.New("-rounds must be at least 1")
	case p.conns < 1 || p.streams < 1 || p.events < 1 || p.records < 1:
		return params{}, errors.New("-conns, -streams, -events and -records must be at least 1")
	case p.settleWindow < 0 || p.settleWindow >= config.DefaultHeartbeat:
		return params{}, fmt.Errorf("-settle-window must be at least 0 and under %s", config.DefaultHeartbeat)
	case p.eventDelay < 0 || p.eventDelay > maxEventDelay:
		return params{}, fmt.Errorf("-event-delay must be between 0 and %s", maxEventDelay)
	}
	return p, nil
}

// run is the whole program; main only wires the process to it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	p, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if p.cpuProfile != "" {
		f, err := os.Create(p.cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}()
	}
	b, err := start(p, stderr)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := b.close(); err == nil {
			err = cerr
		}
	}()

	rep := &report{p: p, cpus: runtime.NumCPU(), maxProcs: runtime.GOMAXPROCS(0)}
	progress := func(what string) { fmt.Fprintf(stderr, "loadbench: %s\n", what) }

	progress("small turns")
	if rep.turns, err = b.turnPhase(ctx); err != nil {
		return err
	}
	progress("streams")
	if rep.streams, err = b.streamPhase(ctx); err != nil {
		return err
	}
	for i, tg := range b.targets {
		progress("open streams' memory through " + tg.name)
		if rep.held[i], err = b.holdPhase(ctx, tg); err != nil {
			return err
		}
	}
	progress("idle trajectory records")
	if rep.records, err = b.recordPhase(ctx); err != nil {
		return err
	}
	if err := rep.write(stdout); err != nil {
		return err
	}
	if n := rep.failures(); n > 0 {
		return fmt.Errorf("%d failed requests or cut streams (see the table)", n)
	}
	return nil
}
