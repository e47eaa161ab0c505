package proxy

import (
	"reflect"

	"gatekeeper/config"
	"gatekeeper/identity"
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
