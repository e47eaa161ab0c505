package identity_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"gatekeeper/config"
	"gatekeeper/identity"
	"gatekeeper/internal/testidp"
)

var (
	alice = testidp.User{Subject: "alice", Name: "Alice Liddell", Email: "alice@example.com", Groups: []string{"oncall", "eng"}}
	bob   = testidp.User{Subject: "bob", Name: "Bob", Email: "bob@example.com", Groups: []string{"sales"}}
)

func idpConfig(idp *testidp.IdP) config.Identity {
	return config.Identity{Issuer: idp.Issuer(), ClientID: testidp.ClientID, GroupsClaim: testidp.GroupsClaim,
		Groups: []config.GroupTenant{{Group: "research", Tenant: "lab"}, {Group: "eng", Tenant: "fleet"}, {Group: "oncall", Tenant: "ops"}}}
}

func TestVerify(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	idp, err := testidp.Start(testidp.Options{AccessTokenLifetime: time.Minute}, alice, bob)
	if err != nil {
		t.Fatal(err)
	}
	defer idp.Close()
	aliceTok, err := idp.Token(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	bobTok, err := idp.Token(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	idToken, _ := aliceTok.Extra("id_token").(string)
	later := func() time.Time { return time.Now().Add(2 * time.Minute) }
	other := idpConfig(idp)
	other.Audience = "another-api"

	for _, tc := range []struct {
		name   string
		cfg    config.Identity
		now    func() time.Time
		token  string
		tenant string
		err    error
	}{
		{name: "access token, the config's first mapping not the person's first group", cfg: idpConfig(idp), token: aliceTok.AccessToken, tenant: "fleet"},
		{name: "id token", cfg: idpConfig(idp), token: idToken, tenant: "fleet"},
		{name: "no group mapped", cfg: idpConfig(idp), token: bobTok.AccessToken, err: identity.ErrNoTenant},
		{name: "expired", cfg: idpConfig(idp), now: later, token: aliceTok.AccessToken, err: identity.ErrToken},
		{name: "another audience", cfg: other, token: aliceTok.AccessToken, err: identity.ErrToken},
		{name: "tampered", cfg: idpConfig(idp), token: aliceTok.AccessToken[:len(aliceTok.AccessToken)-4] + "AAAA", err: identity.ErrToken},
		{name: "not a token", cfg: idpConfig(idp), token: "vk-team-a", err: identity.ErrToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, tenant, err := identity.New(tc.cfg, nil, tc.now).Verify(ctx, tc.token)
			if !errors.Is(err, tc.err) || tc.err == nil && err != nil {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if tenant != tc.tenant {
				t.Errorf("tenant %q, want %q", tenant, tc.tenant)
			}
			if tc.err == nil && (p.Subject != "alice" || p.Name != alice.Name || p.Email != alice.Email || len(p.Groups) != 2 || p.Label() != alice.Email) {
				t.Errorf("person %+v", p)
			}
		})
	}
}

func TestIssuerUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	idp, err := testidp.Start(testidp.Options{}, alice)
	if err != nil {
		t.Fatal(err)
	}
	cfg := idpConfig(idp)
	tok, err := idp.Token(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	idp.Close()
	if _, _, err := identity.New(cfg, nil, nil).Verify(ctx, tok.AccessToken); !errors.Is(err, identity.ErrIssuer) {
		t.Fatalf("err %v, want ErrIssuer", err)
	}
}

// TestRotatedKey: a verifier that read the JWKS before the provider
// rotated its key accepts the new key's tokens.
func TestRotatedKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	idp, err := testidp.Start(testidp.Options{}, alice)
	if err != nil {
		t.Fatal(err)
	}
	defer idp.Close()
	v := identity.New(idpConfig(idp), nil, nil)
	tok, err := idp.Token(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := v.Verify(ctx, tok.AccessToken); err != nil {
		t.Fatal(err)
	}
	if err := idp.RotateKey(false); err != nil {
		t.Fatal(err)
	}
	if tok, err = idp.Token(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := v.Verify(ctx, tok.AccessToken); err != nil {
		t.Fatalf("a token of the rotated key: %v", err)
	}
}

func TestLooksLikeToken(t *testing.T) {
	for key, want := range map[string]bool{
		"eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln": true,
		"vk-team-a":                            false,
		"eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0": false,
		"eyJh.b.c d":                           false,
		"sk-ant-api03-abc.def.ghi":             false,
		"":                                     false,
	} {
		if got := identity.LooksLikeToken(key); got != want {
			t.Errorf("LooksLikeToken(%q) = %v", key, got)
		}
	}
}

// BenchmarkVerify is the cost a person's token adds to a request once the
// issuer's keys are cached: the signature check and the claims.
func BenchmarkVerify(b *testing.B) {
	ctx := context.Background()
	idp, err := testidp.Start(testidp.Options{}, alice)
	if err != nil {
		b.Fatal(err)
	}
	defer idp.Close()
	tok, err := idp.Token(ctx, "alice")
	if err != nil {
		b.Fatal(err)
	}
	v := identity.New(idpConfig(idp), nil, nil)
	if _, _, err := v.Verify(ctx, tok.AccessToken); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := v.Verify(ctx, tok.AccessToken); err != nil {
			b.Fatal(err)
		}
	}
}
