package proxy

import (
	"net/http"

	"gatekeeper/proxy/internal/passthrough"
	"gatekeeper/proxy/internal/wire"
)

// allowsBackground reports whether a background response may be started:
// only when its output can be fetched, that is when pass-through of the
// retrieval of a stored response is allowed.
func (up *upstream) allowsBackground() bool {
	return wire.Passes(up.pass, http.MethodGet, wire.RetrievalPath)
}

// passThrough forwards an allowed non-turn request with the key swapped,
// or with the agent's own credential for a tenant that forwards it
// (passthrough.Gate.Serve), its refusals in up's error form.
func (s *Server) passThrough(w http.ResponseWriter, r *http.Request, req *request) {
	up := req.up
	req.rules.pass.Serve(w, r, passthrough.Call{Provider: up.cfg.Name, Allow: up.pass, Proxy: up.rp, Path: req.rest, Run: req.trajectoryID,
		Tenant: req.tenant, KeyHash: req.keyHash, ID: req.id, Keys: req.keyTurn(up), Own: req.own},
		func(w http.ResponseWriter, err error) { s.writeError(w, r, up.api, req, agentError(err)) })
}
