package proxy

import (
	"net/http"

	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/threadid"
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
	id, err := threadid.FromHeaders(r.Header, req.keyHash)
	switch {
	case err != nil:
		return "", apierr.New(http.StatusBadRequest, apierr.InvalidRequest, err.Error())
	case id != "":
		return id, nil
	}
	return threadid.Implicit(req.keyHash, pr.SessionHint, pr.Fingerprint), nil
}
