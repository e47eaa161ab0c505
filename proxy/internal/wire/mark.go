package wire

import (
	"net/http"
	"strings"

	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/trajectory"
)

// The headers an agent's harness marks its run with. Like every
// X-Gatekeeper-* header they are never forwarded (StripAgentHeaders).
const (
	headerTaskClass = "X-Gatekeeper-Task-Class"
	headerOutcome   = "X-Gatekeeper-Outcome"
)

// ReadMark reads the outcome headers of a request: each at most once, the
// outcome "accepted" or "rejected", the class a short token. A bad value
// is refused before the turn is admitted, so nothing is charged for it.
func ReadMark(h http.Header) (trajectory.Mark, error) {
	var m trajectory.Mark
	for _, f := range []struct {
		name  string
		parse func(string) (string, error)
		into  *string
	}{
		{headerOutcome, trajectory.ParseOutcome, &m.Outcome},
		{headerTaskClass, trajectory.ParseTaskClass, &m.TaskClass},
	} {
		vs := h.Values(f.name)
		switch {
		case len(vs) == 0:
			continue
		case len(vs) > 1:
			return trajectory.Mark{}, apierr.BadRequest(f.name + " was sent more than once; send it once")
		}
		v, err := f.parse(vs[0])
		if err != nil {
			return trajectory.Mark{}, apierr.BadRequest(f.name + ": " + strings.TrimPrefix(err.Error(), "trajectory: invalid outcome: "))
		}
		*f.into = v
	}
	return m, nil
}
