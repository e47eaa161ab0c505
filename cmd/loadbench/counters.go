package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// allocs is a process's cumulative heap allocation.
type allocs struct{ bytes, objects uint64 }

func (a allocs) sub(o allocs) allocs {
	return allocs{bytes: a.bytes - min(a.bytes, o.bytes), objects: a.objects - min(a.objects, o.objects)}
}

// readAllocs reads a target's allocation counters: gatekeeper's from its
// /metrics (the standard Go collector's go_memstats_alloc_bytes_total and
// go_memstats_mallocs_total), the bare proxy's from its runtimePath.
func (b *bench) readAllocs(ctx context.Context, tg target) (allocs, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	path := runtimePath
	if tg.gatekeeper {
		path = "/metrics"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, tg.url+path, nil)
	if err != nil {
		return allocs{}, err
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return allocs{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return allocs{}, fmt.Errorf("GET %s: status %d", path, resp.StatusCode)
	}
	body := io.LimitReader(resp.Body, 16<<20)
	if tg.gatekeeper {
		return parseMetricsAllocs(body)
	}
	var a allocs
	if _, err := fmt.Fscan(body, &a.bytes, &a.objects); err != nil {
		return allocs{}, fmt.Errorf("GET %s: %w", path, err)
	}
	return a, nil
}

// parseMetricsAllocs reads the two allocation counters from a Prometheus
// text exposition.
func parseMetricsAllocs(r io.Reader) (allocs, error) {
	var a allocs
	found := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		var dst *uint64
		switch {
		case !ok:
			continue
		case name == "go_memstats_alloc_bytes_total":
			dst = &a.bytes
		case name == "go_memstats_mallocs_total":
			dst = &a.objects
		default:
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || !(f >= 0 && f < 1<<63) {
			return allocs{}, fmt.Errorf("/metrics: %s is %q", name, v)
		}
		*dst = uint64(f)
		found++
	}
	if err := sc.Err(); err != nil {
		return allocs{}, err
	}
	if found != 2 {
		return allocs{}, errors.New("/metrics: go_memstats_alloc_bytes_total and go_memstats_mallocs_total not both found")
	}
	return a, nil
}

// cost is what one process (and with Redis, redis-server) spent over some
// work.
type cost struct {
	cpu    time.Duration
	allocs allocs
	// redisCPU and redisCmds are redis-server's CPU time and commands
	// processed, gatekeeper's rounds on Redis only.
	redisCPU     time.Duration
	redisCmds    int64
	redisScripts int64
	logBytes     int64 // bytes gatekeeper wrote to its log
	// err is the first counter that could not be read; the figures are
	// then not reported.
	err error
}

func (c *cost) add(o cost) {
	c.cpu += o.cpu
	c.allocs.bytes += o.allocs.bytes
	c.allocs.objects += o.allocs.objects
	c.redisCPU += o.redisCPU
	c.redisCmds += o.redisCmds
	c.redisScripts += o.redisScripts
	c.logBytes += o.logBytes
	c.err = errors.Join(c.err, o.err)
}

// mark is the counters read as some work begins.
type mark struct {
	tg     int
	cpu    time.Duration
	allocs allocs
	redis  redisCounters
	log    int64
	err    error
}

// mark reads target i's counters. The allocation counters are read over
// HTTP and their read allocates in the target: since takes scrapeCost off.
func (b *bench) mark(ctx context.Context, i int) mark {
	tg := b.targets[i]
	m := mark{tg: i}
	var errs [4]error
	if tg.gatekeeper && b.redis != nil {
		m.redis, errs[0] = b.redisCounters(ctx)
	}
	m.allocs, errs[1] = b.readAllocs(ctx, tg)
	m.cpu, errs[2] = procCPU(tg.proc.pid())
	if tg.gatekeeper {
		m.log, errs[3] = fileSize(tg.proc.log)
	}
	m.err = errors.Join(errs[:]...)
	return m
}

// since is what target m.tg spent since m.
func (b *bench) since(ctx context.Context, m mark) cost {
	now := b.mark(ctx, m.tg)
	c := cost{
		cpu:      now.cpu - m.cpu,
		allocs:   now.allocs.sub(m.allocs).sub(b.scrapeCost[m.tg]),
		logBytes: now.log - m.log,
		err:      errors.Join(m.err, now.err),
	}
	if b.targets[m.tg].gatekeeper && b.redis != nil {
		c.redisCPU = now.redis.cpu - m.redis.cpu
		// The INFO that read m's counters is counted in now's.
		c.redisCmds = now.redis.commands - m.redis.commands - 1
		c.redisScripts = now.redis.scripts - m.redis.scripts
	}
	return c
}

func fileSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}
