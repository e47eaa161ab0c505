package escrow

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"gatekeeper/approvals"
)

// Holds stored before a hold recorded its place in its turn's chain
// (approvals.Hold.Generation and Previous, Generation 0 in them) carried it
// in their key: the turn key for the first, then the turn key and "/1" …
// "/8", each under its own entry of the store's turn index, which kept
// pointing at the first. They are read here until they expire (the gate's
// expiry and the store's retention after), so that a turn held across an
// upgrade still re-attaches, and its continuation finds its earlier reply.

// latestHold is the latest hold of h's turn, h being the hold the store's
// turn index names: h itself when no hold of the old layout follows it
// (of which a turn has fewer than max).
func latestHold(ctx context.Context, st approvals.Store, h *approvals.Hold, max int) (*approvals.Hold, error) {
	key, _ := splitLegacyKey(h.Key)
	for gen := 1; gen < max && h.Generation == 0; gen++ {
		next, err := st.FindHold(ctx, h.Trajectory, key+"/"+strconv.Itoa(gen))
		if errors.Is(err, approvals.ErrNotFound) {
			break
		}
		if err != nil {
			return nil, err
		}
		h = next
	}
	return h, nil
}

// legacyPrevious is the hold a continuation's hold h of the old layout
// follows: the one of the generation before in its key.
func legacyPrevious(ctx context.Context, st approvals.Store, h *approvals.Hold) (*approvals.Hold, error) {
	key, gen := splitLegacyKey(h.Key)
	switch {
	case gen == 0:
		return nil, fmt.Errorf("hold %s of a continuation has no earlier hold", h.ID)
	case gen > 1:
		key += "/" + strconv.Itoa(gen-1)
	}
	return st.FindHold(ctx, h.Trajectory, key)
}

// splitLegacyKey splits the key of a hold of the old layout into its turn
// key and its generation.
func splitLegacyKey(k string) (key string, gen int) {
	i := strings.LastIndexByte(k, '/')
	if i < 0 {
		return k, 0
	}
	n, err := strconv.Atoi(k[i+1:])
	if err != nil {
		return k, 0
	}
	return k[:i], n
}
