package testidp_test

import (
	"context"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"gatekeeper/internal/testidp"
)

const redirect = "http://127.0.0.1:1/callback"

// TestCodeFlowWithPKCE signs bob in through the login form and exchanges
// the code with its PKCE verifier and the client's secret; the ID token
// verifies with the client library and carries the nonce and the groups.
// A wrong password, a wrong verifier, a spent code and an expired code are
// refused.
func TestCodeFlowWithPKCE(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bob := testidp.User{Subject: "bob", Name: "Bob", Email: "bob@example.com", Groups: []string{"secops"}, Password: "hunter2"}
	idp, err := testidp.Start(testidp.Options{RedirectURIs: []string{redirect}}, bob)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(idp.Close)
	p, err := oidc.NewProvider(ctx, idp.Issuer())
	if err != nil {
		t.Fatal(err)
	}
	conf := oauth2.Config{ClientID: testidp.WebClientID, ClientSecret: testidp.WebClientSecret, Endpoint: p.Endpoint(),
		RedirectURL: redirect, Scopes: []string{oidc.ScopeOpenID, "profile", "email", testidp.GroupsClaim}}
	code := func(password, verifier string) (string, error) {
		back, err := idp.SignIn(ctx, conf.AuthCodeURL("st-1", oidc.Nonce("n-1"), oauth2.S256ChallengeOption(verifier)), "bob", password)
		if err != nil {
			return "", err
		}
		if back.Query().Get("state") != "st-1" {
			t.Fatalf("back with %s", back)
		}
		return back.Query().Get("code"), nil
	}
	if _, err := code("wrong", oauth2.GenerateVerifier()); err == nil {
		t.Fatal("a wrong password signed in")
	}
	verifier := oauth2.GenerateVerifier()
	c, err := code("hunter2", verifier)
	if err != nil || c == "" {
		t.Fatalf("code %q: %v", c, err)
	}
	if _, err := conf.Exchange(ctx, c, oauth2.VerifierOption(oauth2.GenerateVerifier())); err == nil {
		t.Fatal("a code exchanged with another verifier")
	}
	c, _ = code("hunter2", verifier)
	tok, err := conf.Exchange(ctx, c, oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := tok.Extra("id_token").(string)
	it, err := p.Verifier(&oidc.Config{ClientID: testidp.WebClientID}).Verify(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	var cl claims
	if err := it.Claims(&cl); err != nil {
		t.Fatal(err)
	}
	if it.Nonce != "n-1" || it.Subject != "bob" || cl.Name != "Bob" || len(cl.Groups) != 1 || cl.Groups[0] != "secops" {
		t.Fatalf("id token: nonce %q subject %q claims %+v", it.Nonce, it.Subject, cl)
	}
	if _, err := conf.Exchange(ctx, c, oauth2.VerifierOption(verifier)); err == nil {
		t.Fatal("a spent code exchanged again")
	}
	c, _ = code("hunter2", verifier)
	idp.ExpireCodes()
	if _, err := conf.Exchange(ctx, c, oauth2.VerifierOption(verifier)); err == nil {
		t.Fatal("an expired code exchanged")
	}
	idp.Disable("bob")
	if _, err := code("hunter2", verifier); err == nil {
		t.Fatal("a disabled user signed in")
	}
}
