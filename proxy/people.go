package proxy

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"

	"gatekeeper/config"
	"gatekeeper/identity"
	"gatekeeper/proxy/internal/apierr"
)

// peopleVerifier is the verifier of cfg's identity section, nil when
// people do not sign in: old's when the section is unchanged, so that a
// reload keeps the issuer's discovery and cached keys.
func (s *Server) peopleVerifier(cfg *config.Config, old *rules) *identity.Verifier {
	switch {
	case !cfg.Identity.On():
		return nil
	case old != nil && old.people != nil && reflect.DeepEqual(old.people.Config(), cfg.Identity):
		return old.people
	}
	// Tokens are judged on the wall clock, as their issuer stamps them,
	// whatever clock the records keep.
	return identity.New(cfg.Identity, nil, nil)
}

// modelAllowed refuses the turn of a person whose groups' model lists
// (identity.models) allow none matching model, in the agent's provider's
// error format: 403, as the provider answers a key without access.
// Virtual keys are not restricted.
func modelAllowed(req *request, model string) error {
	p := req.person
	if p == nil || len(req.rules.cfg.Identity.Models) == 0 || req.rules.cfg.Identity.ModelAllowed(p.Groups, model) {
		return nil
	}
	var listed []string
	for _, m := range req.rules.cfg.Identity.Models {
		for _, g := range p.Groups {
			if g == m.Group {
				listed = append(listed, m.Group)
			}
		}
	}
	return &apierr.Error{Code: http.StatusForbidden, Type: apierr.Permission, NoRetry: true,
		Msg: fmt.Sprintf("model %q is not allowed for %s: the model lists of group %s allow it no match; ask your platform team (identity.models)",
			model, p.Label(), strings.Join(listed, ", "))}
}
