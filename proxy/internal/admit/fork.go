package admit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gatekeeper/proxy/internal/threadid"
)

// Thread is the record a thread under parent is admitted on: its own
// child id, created when missing (Child), or, once parent has MaxChildren
// children, the last of them, shared.
func (r *Records) Thread(ctx context.Context, parent, tenant, id, key string) (rid string, shared bool, err error) {
	err = r.Child(ctx, parent, tenant, id, key)
	var full *ChildrenFull
	if errors.As(err, &full) {
		r.Log.LogAttrs(ctx, slog.LevelWarn, "record has limits.max_children children; the thread shares the last",
			slog.String("trajectory", parent), slog.String("shares", full.Last))
		return full.Last, true, nil
	}
	return id, false, err
}

// Fork admits a thread's call with try on its record base or, while each
// record tried is busy (try answers ErrBusy), on the next sibling of base
// under parent, created when missing: a call is never blocked by another
// call of its conversation. Past threadid.MaxSiblings siblings, or when
// parent has MaxChildren children, the call is refused as contended.
func (r *Records) Fork(ctx context.Context, parent, base, tenant, key string, try func(id string) error) error {
	candidate := base
	for n := 1; n <= threadid.MaxSiblings; n++ {
		if n > 1 {
			// A sibling is a child of the busy thread's parent (of the
			// root when the busy thread is the root itself).
			candidate = threadid.Sibling(parent, base, n)
			var full *ChildrenFull
			if err := r.Child(ctx, parent, tenant, candidate, key); errors.As(err, &full) {
				break
			} else if err != nil {
				return err
			}
		}
		if err := try(candidate); !errors.Is(err, ErrBusy) {
			return err
		}
	}
	return &Refusal{Kind: Contended, RetryAfter: 2 * time.Second,
		Msg: fmt.Sprintf("more than %d calls of one conversation are in flight; retry shortly", threadid.MaxSiblings)}
}
