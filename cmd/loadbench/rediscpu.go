package main

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// redisCPU is the CPU time redis-server has used since it started (its
// INFO cpu: system and user time of every thread). redis-server shares
// the machine's cores with gatekeeper, so what it spends per turn is part
// of what a turn costs; the process CPU figures do not see it.
func (b *bench) redisCPU(ctx context.Context) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := b.redis.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	return parseRedisCPU(info)
}

// parseRedisCPU reads used_cpu_sys and used_cpu_user (seconds) from an
// INFO cpu reply.
func parseRedisCPU(info string) (time.Duration, error) {
	var total float64
	found := 0
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || (name != "used_cpu_sys" && name != "used_cpu_user") {
			continue
		}
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || s < 0 {
			return 0, fmt.Errorf("redis INFO cpu: %s is %q", name, v)
		}
		total += s
		found++
	}
	if found != 2 {
		return 0, fmt.Errorf("redis INFO cpu: used_cpu_sys and used_cpu_user not both found in %q", info)
	}
	return time.Duration(total * float64(time.Second)), nil
}
