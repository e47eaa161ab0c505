package proxy

import (
	"errors"
	"net/http"

	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/keys"
	"gatekeeper/proxy/internal/outcome"
	"gatekeeper/proxy/internal/settle"
	"gatekeeper/ratelimit"
)

// The provider keys' scheduling (package keys) bound to what proxy knows:
// a turn's outcome, the settles waiting behind replies, and the agent's
// error form.

// keyUsed is what the turn's outcome o used of its key.
func keyUsed(o outcome.Turn) ratelimit.Cost { return keys.Used(o.Upstream, o.Usage) }

// rideKeySettles prepares the key settles of the settles ps, which an
// admission takes, to ride in its update (one round trip for them all,
// rather than a flush's): each turn's grant leaves it, so that the flush
// that later writes its tenant's side sends no key settle again. Nil when
// none went on a limited key.
func rideKeySettles(ps []*settle.Turn) *ratelimit.SettleRide {
	var ss []ratelimit.Settlement
	for _, p := range ps {
		if st := p.LeaveKey(); st.Grant != nil {
			ss = append(ss, st)
		}
	}
	return ratelimit.RideSettles(ss)
}

// rateLimitedOutcome is how a turn that never got key capacity settles
// (outcome.RateLimited), for the refusal err.
func rateLimitedOutcome(err error) outcome.Turn {
	status, cause := http.StatusTooManyRequests, err
	var he *apierr.Error
	if errors.As(err, &he) {
		status = he.Code
		if he.Err != nil {
			cause = he.Err
		}
	}
	return outcome.RateLimited(status, cause)
}
