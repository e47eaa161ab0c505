package wire

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"gatekeeper/config"
	"gatekeeper/identity"
	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/signin"
	"gatekeeper/trajectory"
)

// people admits the people whose token the identity provider signed, as
// the tenants their groups map to.
type people struct {
	verifier *identity.Verifier
	tenants  map[string]*config.Tenant
	revoked  revocations
}

// revocations is what Resolve asks of the sign-in's revocation store.
type revocations interface {
	Revoked(ctx context.Context, key string) (bool, error)
}

var _ revocations = signin.Revocations(nil)

// AdmitPeople makes kr accept, besides virtual keys, the tokens v
// verifies, each as the tenant of tenants its person's groups map to;
// with revoked (non-nil), a token revoked at the gateway sign-in is
// refused too.
func (kr *Keyring) AdmitPeople(v *identity.Verifier, tenants []config.Tenant, revoked revocations) {
	p := &people{verifier: v, tenants: make(map[string]*config.Tenant, len(tenants)), revoked: revoked}
	for i := range tenants {
		p.tenants[tenants[i].Name] = &tenants[i]
	}
	kr.people = p
}

// Resolve returns the tenant of key, the hash that scopes its sessions and
// conversations, and the person when key is a person's token: a virtual
// key first (Lookup), else, when kr admits people and key has a token's
// shape, the token as the identity provider's verification takes it. A
// token refused is an *apierr.Error in the agent's terms; a key that is
// neither is a nil tenant, for the caller to refuse.
func (kr *Keyring) Resolve(ctx context.Context, key string) (*config.Tenant, [32]byte, *trajectory.Person, error) {
	tn, h := kr.Lookup(key)
	if tn != nil || kr.people == nil || !identity.LooksLikeToken(key) {
		return tn, h, nil, nil
	}
	v := kr.people.verifier
	p, name, err := v.Verify(ctx, key)
	switch {
	case errors.Is(err, identity.ErrNoTenant):
		return nil, h, nil, &apierr.Error{Code: http.StatusForbidden, Type: apierr.Permission, NoRetry: true, Err: err,
			Msg: fmt.Sprintf("signed in as %s, but none of your identity provider's groups is mapped to a gatekeeper tenant; ask your platform team to map one (identity.groups)", p.Label())}
	case errors.Is(err, identity.ErrIssuer):
		return nil, h, nil, &apierr.Error{Code: http.StatusServiceUnavailable, Type: apierr.Internal, RetryAfter: 5 * time.Second, Err: err,
			Msg: "gatekeeper cannot reach the identity provider to check your sign-in token; retry shortly"}
	case err != nil:
		return nil, h, nil, &apierr.Error{Code: http.StatusUnauthorized, Type: apierr.Authentication, NoRetry: true, Err: err,
			Msg: "your sign-in token was refused (expired, revoked, or not issued for this gatekeeper); sign in again (/login in Claude Code, or `gatekeeper login`)"}
	}
	if kr.people.revoked != nil {
		// One store read per turn of a person, none for virtual keys:
		// what makes a revocation hold on every replica at once.
		gone, err := kr.people.revoked.Revoked(ctx, signin.TokenKey(key))
		switch {
		case err != nil:
			return nil, h, nil, &apierr.Error{Code: http.StatusServiceUnavailable, Type: apierr.Internal, RetryAfter: 5 * time.Second, Err: err,
				Msg: "gatekeeper cannot check your sign-in now; retry shortly"}
		case gone:
			return nil, h, nil, &apierr.Error{Code: http.StatusUnauthorized, Type: apierr.Authentication, NoRetry: true,
				Msg: "your sign-in was revoked; sign in again (/login in Claude Code, or `gatekeeper login`)"}
		}
	}
	tn = kr.people.tenants[name]
	if tn == nil {
		// The config maps the group to a tenant it validated; a reload
		// that dropped the tenant took the mapping with it.
		return nil, h, nil, apierr.New(http.StatusForbidden, apierr.Permission, "your groups map to no tenant of the running config")
	}
	return tn, identity.KeyHash(v.Config().Issuer, p.Subject), p, nil
}
