package redis

import (
	"container/heap"
	"context"

	goredis "github.com/redis/go-redis/v9"
)

// lexMerge walks sorted sets whose members all have score 0 in lexical
// order, as if they were one set: a k-way merge that reads each set a
// chunk at a time. The per-slot indexes are such sets; walked together
// they read as one index of every slot.
type lexMerge struct {
	rdb   pipeliner
	keys  []string
	chunk int64

	started bool
	bufs    [][]string // what was read of each set and not yet handed out
	from    []string   // where the next read of each set starts
	done    []bool     // the set has nothing after its buffer
	h       mergeHeap
}

func newLexMerge(rdb pipeliner, keys []string, chunk int) *lexMerge {
	m := &lexMerge{
		rdb: rdb, keys: keys, chunk: int64(chunk),
		bufs: make([][]string, len(keys)), from: make([]string, len(keys)), done: make([]bool, len(keys)),
	}
	m.h.bufs = m.bufs
	for i := range m.from {
		m.from[i] = "-"
	}
	return m
}

// next hands out the smallest member not yet handed out, with the index of
// its set in keys; ok is false once every set is walked.
func (m *lexMerge) next(ctx context.Context) (member string, key int, ok bool, err error) {
	if !m.started {
		all := make([]int, len(m.keys))
		for i := range all {
			all[i] = i
		}
		if err := m.read(ctx, all); err != nil {
			return "", 0, false, err
		}
		for i, b := range m.bufs {
			if len(b) > 0 {
				m.h.idx = append(m.h.idx, i)
			}
		}
		heap.Init(&m.h)
		m.started = true
	}
	if m.h.Len() == 0 {
		return "", 0, false, nil
	}
	i := m.h.idx[0]
	member = m.bufs[i][0]
	m.bufs[i] = m.bufs[i][1:]
	if len(m.bufs[i]) == 0 && !m.done[i] {
		// The set's next member may sort before every other head: read
		// it before choosing again.
		if err := m.read(ctx, []int{i}); err != nil {
			return "", 0, false, err
		}
	}
	if len(m.bufs[i]) == 0 {
		heap.Pop(&m.h)
	} else {
		heap.Fix(&m.h, 0)
	}
	return member, i, true, nil
}

// read fills the buffers of the sets which, in one round trip.
func (m *lexMerge) read(ctx context.Context, which []int) error {
	pipe := m.rdb.Pipeline()
	cmds := make([]*goredis.StringSliceCmd, len(which))
	for j, i := range which {
		cmds[j] = pipe.ZRangeArgs(ctx, goredis.ZRangeArgs{Key: m.keys[i], Start: m.from[i], Stop: "+", ByLex: true, Count: m.chunk})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	for j, i := range which {
		got := cmds[j].Val()
		m.bufs[i] = got
		m.done[i] = int64(len(got)) < m.chunk
		if len(got) > 0 {
			m.from[i] = "(" + got[len(got)-1]
		}
	}
	return nil
}

// pipeliner is what a walk of several keys needs of a client.
type pipeliner interface {
	Pipeline() goredis.Pipeliner
}

// mergeHeap orders the sets with something buffered by their first member.
type mergeHeap struct {
	idx  []int
	bufs [][]string
}

func (h *mergeHeap) Len() int           { return len(h.idx) }
func (h *mergeHeap) Less(a, b int) bool { return h.bufs[h.idx[a]][0] < h.bufs[h.idx[b]][0] }
func (h *mergeHeap) Swap(a, b int)      { h.idx[a], h.idx[b] = h.idx[b], h.idx[a] }
func (h *mergeHeap) Push(x any)         { h.idx = append(h.idx, x.(int)) }
func (h *mergeHeap) Pop() any {
	x := h.idx[len(h.idx)-1]
	h.idx = h.idx[:len(h.idx)-1]
	return x
}
