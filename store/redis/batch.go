package redis

import (
	"context"
	"slices"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"gatekeeper/trajectory"
)

// UpdateChains is UpdateChain of each id with its fn, the scripts of
// records in different trees sent in one pipeline: one round trip for
// them all when this process saw the last save of every chain (on a
// cluster, one per node, in parallel). Two records of one tree both
// write its root, so one tree's updates go in successive pipelines. An
// update whose chain moved, or whose script the server lost, runs again
// alone, as UpdateChain runs it. errs[i] is id i's outcome.
func (s *Store) UpdateChains(ctx context.Context, ids []string, fns []func([]*trajectory.Record) ([]trajectory.Event, error)) (errs []error) {
	errs = make([]error, len(ids))
	left := make([]int, 0, len(ids))
	for i, id := range ids {
		if id == "" || checkID(id) != nil {
			errs[i] = notFound(id)
			continue
		}
		left = append(left, i)
	}
	var alone []int
	for len(left) > 0 {
		var round []int
		round, left = oneTreeEach(ids, left)
		alone = append(alone, s.updateRound(ctx, ids, fns, round, errs)...)
	}
	for _, i := range alone {
		_, errs[i] = s.update(ctx, ids[i], wholeChain, fns[i])
	}
	return errs
}

// oneTreeEach splits idx (indexes of ids) into the first of each tree and
// the rest.
func oneTreeEach(ids []string, idx []int) (round, rest []int) {
	seen := make(map[string]bool, len(idx))
	for _, i := range idx {
		if root := rootOf(ids[i]); !seen[root] {
			seen[root] = true
			round = append(round, i)
		} else {
			rest = append(rest, i)
		}
	}
	return round, rest
}

// updateRound sends one attempt of each update of round (all in
// different trees) in one pipeline, holding their trees' locks, and
// returns those that must run again alone.
func (s *Store) updateRound(ctx context.Context, ids []string, fns []func([]*trajectory.Record) ([]trajectory.Event, error), round []int, errs []error) (again []int) {
	if err := s.usable(ctx); err != nil {
		for _, i := range round {
			errs[i] = s.fail(ctx, "update "+ids[i], err)
		}
		return nil
	}
	// Locked in one order, so that two rounds never wait on each other.
	slices.SortFunc(round, func(a, b int) int { return strings.Compare(rootOf(ids[a]), rootOf(ids[b])) })
	var unlocks []func()
	defer func() {
		for _, u := range unlocks {
			u()
		}
	}()
	tries := make([]*try, len(ids))
	fresh := make([]map[string]*entry, len(ids))
	cmds := make([]*goredis.Cmd, len(ids))
	pipe := s.rdb.Pipeline() // the commands' builder, sent by s.pipes
	sent := 0
	for _, i := range round {
		unlock, err := s.locks.lock(ctx, rootOf(ids[i]))
		if err != nil {
			// Out of time waiting behind another update of the tree,
			// most often one waiting on a Redis that does not answer:
			// unavailable, so that the caller tries again later.
			errs[i] = s.fail(ctx, "update "+ids[i], err)
			continue
		}
		unlocks = append(unlocks, unlock)
		fresh[i] = make(map[string]*entry)
		a, err := s.attempt(ctx, ids[i], wholeChain, fns[i], fresh[i])
		if err != nil {
			errs[i] = err
			continue
		}
		if a.before != nil {
			a.before(pipe)
		}
		tries[i], cmds[i] = a, chainScript.EvalSha(ctx, pipe, a.w.keys, a.args(ctx, s)...)
		sent++
	}
	if sent == 0 {
		return nil
	}
	// Each script's own reply is read below; the commands before them
	// are bookkeeping, as in eval.
	sendErr := s.pipes.exec(ctx, pipe.Cmds())
	for _, i := range round {
		cmd := cmds[i]
		if cmd == nil {
			continue
		}
		if sendErr != nil {
			_, _, errs[i] = s.answer(ctx, tries[i], nil, sendErr, fresh[i])
			continue
		}
		if noScript(cmd.Err()) {
			again = append(again, i)
			continue
		}
		v, err := cmd.Result()
		_, retry, err := s.answer(ctx, tries[i], v, err, fresh[i])
		if retry {
			again = append(again, i)
			continue
		}
		errs[i] = err
	}
	return again
}
