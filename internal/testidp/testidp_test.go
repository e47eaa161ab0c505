package testidp_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"gatekeeper/internal/testidp"
)

var alice = testidp.User{Subject: "alice", Name: "Alice Liddell", Email: "alice@example.com", Groups: []string{"eng", "oncall"}}

func start(t *testing.T, opts testidp.Options) *testidp.IdP {
	t.Helper()
	idp, err := testidp.Start(opts, alice)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(idp.Close)
	return idp
}

func verifier(t *testing.T, ctx context.Context, idp *testidp.IdP) *oidc.IDTokenVerifier {
	t.Helper()
	p, err := oidc.NewProvider(ctx, idp.Issuer())
	if err != nil {
		t.Fatal(err)
	}
	return p.Verifier(&oidc.Config{ClientID: testidp.ClientID})
}

type claims struct {
	Name   string   `json:"name"`
	Email  string   `json:"email"`
	Groups []string `json:"groups"`
}

// TestDeviceFlow signs alice in through the device grant and checks both
// tokens with the client library: signature by the JWKS, issuer,
// audience, expiry, and the person's claims.
func TestDeviceFlow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	idp := start(t, testidp.Options{})
	tok, err := idp.Token(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if tok.RefreshToken == "" {
		t.Fatal("no refresh token")
	}
	v := verifier(t, ctx, idp)
	raw, _ := tok.Extra("id_token").(string)
	for name, token := range map[string]string{"access": tok.AccessToken, "id": raw} {
		it, err := v.Verify(ctx, token)
		if err != nil {
			t.Fatalf("%s token: %v", name, err)
		}
		var c claims
		if err := it.Claims(&c); err != nil {
			t.Fatal(err)
		}
		if it.Subject != "alice" || c.Name != alice.Name || c.Email != alice.Email || len(c.Groups) != 2 || c.Groups[0] != "eng" {
			t.Errorf("%s token: subject %q claims %+v", name, it.Subject, c)
		}
	}
}

// TestPendingUntilApproved: before the person approves, the device's poll
// is told to wait; an unknown user cannot approve.
func TestPendingUntilApproved(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	idp := start(t, testidp.Options{})
	conf := idp.OAuth2()
	da, err := conf.DeviceAuth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if da.VerificationURI != idp.Issuer()+"/device" || da.UserCode == "" {
		t.Fatalf("device auth %+v", da)
	}
	short, stop := context.WithTimeout(ctx, 1500*time.Millisecond)
	_, err = conf.DeviceAccessToken(short, da)
	stop()
	if err == nil {
		t.Fatal("a token before approval")
	}
	if err := idp.Approve(da.UserCode, "mallory"); err == nil {
		t.Fatal("an unknown user approved")
	}
	if err := idp.Approve(da.UserCode, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := conf.DeviceAccessToken(ctx, da); err != nil {
		t.Fatal(err)
	}
}

// TestRefreshAndDisable: a refresh gives a new access token while the user
// is active, and fails once the user is disabled.
func TestRefreshAndDisable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	idp := start(t, testidp.Options{AccessTokenLifetime: time.Minute})
	tok, err := idp.Token(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	refresh := func(rt string) (*oauth2.Token, error) {
		return idp.OAuth2().TokenSource(ctx, &oauth2.Token{RefreshToken: rt, Expiry: time.Unix(1, 0)}).Token()
	}
	next, err := refresh(tok.RefreshToken)
	if err != nil {
		t.Fatal(err)
	}
	if next.AccessToken == tok.AccessToken || next.RefreshToken == "" {
		t.Fatal("refresh gave no new tokens")
	}
	if _, err := verifier(t, ctx, idp).Verify(ctx, next.AccessToken); err != nil {
		t.Fatal(err)
	}
	if _, err := refresh(tok.RefreshToken); err == nil {
		t.Error("a spent refresh token refreshed again")
	}
	idp.Disable("alice")
	_, err = refresh(next.RefreshToken)
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) || re.ErrorCode != "invalid_grant" {
		t.Fatalf("refresh of a disabled user: %v", err)
	}
}

// TestKeyRotation: a token signed by a new key verifies with a verifier
// that fetched the JWKS before it (the client library refetches on an
// unknown key id); one signed by a key dropped from the JWKS does not.
func TestKeyRotation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	idp := start(t, testidp.Options{})
	v := verifier(t, ctx, idp)
	old, err := idp.Token(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(ctx, old.AccessToken); err != nil {
		t.Fatal(err)
	}
	if err := idp.RotateKey(true); err != nil {
		t.Fatal(err)
	}
	fresh, err := idp.Token(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{fresh.AccessToken, old.AccessToken} {
		if _, err := v.Verify(ctx, tok); err != nil {
			t.Fatalf("after a rotation keeping the old key: %v", err)
		}
	}
	if err := idp.RotateKey(false); err != nil {
		t.Fatal(err)
	}
	if _, err := verifier(t, ctx, idp).Verify(ctx, old.AccessToken); err == nil {
		t.Fatal("a token of a dropped key verified")
	}
}

// TestExpiry: an access token past its lifetime fails verification.
func TestExpiry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	idp := start(t, testidp.Options{AccessTokenLifetime: time.Second})
	tok, err := idp.Token(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	p, err := oidc.NewProvider(ctx, idp.Issuer())
	if err != nil {
		t.Fatal(err)
	}
	later := func() time.Time { return time.Now().Add(time.Minute) }
	if _, err := p.Verifier(&oidc.Config{ClientID: testidp.ClientID, Now: later}).Verify(ctx, tok.AccessToken); err == nil {
		t.Fatal("an expired token verified")
	}
}
