package proxy

import (
	"net/http"

	"gatekeeper/proxy/internal/threadid"
	"gatekeeper/proxy/internal/wire"
	"gatekeeper/streaming"
)

// rootID decides which trajectory a request belongs to, in order: path
// prefix, X-Gatekeeper-Trajectory, the client's own session id (scoped to
// the virtual key), and else one trajectory per virtual key and
// conversation.
func rootID(r *http.Request, req *request, pr *streaming.Request) (string, error) {
	if req.trajectoryID != "" {
		return req.trajectoryID, nil
	}
	if id, err := wire.HeaderRun(r.Header, req.keyHash); id != "" || err != nil {
		return id, err
	}
	return threadid.Implicit(req.keyHash, pr.SessionHint, pr.Fingerprint), nil
}
