package main

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// redisClient is the benchmark's own connection to gatekeeper's Redis, for
// INFO only. It refuses a database that holds keys: the figures per record
// and per turn would count what was there before, and the benchmark's
// records would be left among someone's data.
func redisClient(ctx context.Context, url string) (goredis.UniversalClient, error) {
	opt, err := goredis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("-redis: %w", err)
	}
	c := goredis.NewClient(opt)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := c.DBSize(ctx).Result()
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("-redis %s: %w", url, err)
	}
	if n > 0 {
		_ = c.Close()
		return nil, fmt.Errorf("-redis %s: the database holds %d keys; give the benchmark an empty one", url, n)
	}
	return c, nil
}

// maxSeconds bounds a CPU time read, far past any process's life, so that
// it fits a time.Duration.
const maxSeconds = 1e8

// redisCounters are redis-server's totals since it started.
type redisCounters struct {
	// cpu is its CPU time (INFO cpu: system and user time of every
	// thread). redis-server shares the machine's cores with gatekeeper,
	// so what it spends per turn is part of what a turn costs.
	cpu time.Duration
	// commands is INFO stats total_commands_processed: every command
	// executed, those a Lua script called included.
	commands int64
	// scripts is the calls of EVALSHA, EVAL and FCALL (and their _ro
	// forms) in INFO commandstats: the scripts run.
	scripts int64
	memory  int64 // INFO memory used_memory, bytes
}

// redisCounters reads them in one INFO.
func (b *bench) redisCounters(ctx context.Context) (redisCounters, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := b.redis.Info(ctx, "cpu", "stats", "memory", "commandstats").Result()
	if err != nil {
		return redisCounters{}, err
	}
	return parseRedisInfo(info)
}

// scriptCommands are the commandstats lines of commands that run a script.
var scriptCommands = map[string]bool{
	"cmdstat_evalsha": true, "cmdstat_eval": true, "cmdstat_evalsha_ro": true, "cmdstat_eval_ro": true,
	"cmdstat_fcall": true, "cmdstat_fcall_ro": true,
}

// parseRedisInfo reads used_cpu_sys and used_cpu_user (seconds),
// total_commands_processed, used_memory and the scripts' calls from an
// INFO reply.
func parseRedisInfo(info string) (redisCounters, error) {
	var c redisCounters
	var cpu float64
	found := 0
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		switch name {
		case "used_cpu_sys", "used_cpu_user":
			s, err := strconv.ParseFloat(v, 64)
			if err != nil || !(s >= 0 && s < maxSeconds) {
				return redisCounters{}, fmt.Errorf("redis INFO: %s is %q", name, v)
			}
			cpu += s
		case "total_commands_processed", "used_memory":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return redisCounters{}, fmt.Errorf("redis INFO: %s is %q", name, v)
			}
			if name == "used_memory" {
				c.memory = n
			} else {
				c.commands = n
			}
		default:
			if scriptCommands[name] {
				calls, err := commandCalls(v)
				if err != nil {
					return redisCounters{}, fmt.Errorf("redis INFO: %s: %w", name, err)
				}
				c.scripts += calls
			}
			continue
		}
		found++
	}
	if found != 4 {
		return redisCounters{}, fmt.Errorf("redis INFO: used_cpu_sys, used_cpu_user, total_commands_processed and used_memory not all found in %.300q", info)
	}
	c.cpu = time.Duration(cpu * float64(time.Second))
	return c, nil
}

// commandCalls reads calls=N from a commandstats value
// ("calls=12,usec=34,usec_per_call=2.83,...").
func commandCalls(v string) (int64, error) {
	for f := range strings.SplitSeq(v, ",") {
		if n, ok := strings.CutPrefix(f, "calls="); ok {
			calls, err := strconv.ParseInt(n, 10, 64)
			if err != nil || calls < 0 {
				return 0, fmt.Errorf("calls is %q", n)
			}
			return calls, nil
		}
	}
	return 0, fmt.Errorf("no calls= in %q", v)
}
