package admit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"gatekeeper/config"
	"gatekeeper/proxy/internal/threadid"
	"gatekeeper/trajectory"
)

// Thread is the record a thread under parent is admitted on: its own
// child id, created when missing (Child), or, once parent has MaxChildren
// children, the last of them, shared.
func (r *Records) Thread(ctx context.Context, parent, tenant, id, key string) (rid string, shared bool, err error) {
	err = r.Child(ctx, parent, tenant, id, key)
	var full *trajectory.ChildrenFullError
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
			var full *trajectory.ChildrenFullError
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

// Place finds the record a thread's call is first tried on, in run rid
// (of tenant tn; named says the request named it): the run's root,
// created when missing (Root), serves the first conversation that claims
// it; any other conversation (key) is a child record of the root, or of
// its parent thread's record (parentKey) when there is one (Thread).
// shared says the child is a last one, shared past MaxChildren.
func (r *Records) Place(ctx context.Context, rid string, named bool, tn *config.Tenant, key, parentKey string) (root *trajectory.Record, h Hint, shared bool, err error) {
	if named {
		if rid, err = r.Scoped(ctx, rid, tn.Name); err != nil {
			return nil, h, false, err
		}
	}
	root, err = r.Root(ctx, rid, named, tn)
	if errors.Is(err, ErrOtherTenant) && named && !strings.Contains(rid, "@") {
		// Another tenant took the name between the look and the create.
		rid = trajectory.TenantScoped(rid, tn.Name)
		root, err = r.Root(ctx, rid, named, tn)
	}
	if err != nil {
		return nil, h, false, err
	}
	parent := root
	if parentKey != "" {
		if p, err := r.Store.Get(ctx, threadid.Child(root.ID, parentKey)); err == nil {
			parent = p
		}
	}
	h.Parent, h.Base = parent.ID, root.ID
	if parent != root || root.Thread != key && root.Thread != "" {
		h.Base, shared, err = r.Thread(ctx, parent.ID, tn.Name, threadid.Child(parent.ID, key), key)
	}
	return root, h, shared, err
}
