package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"gatekeeper/config"
)

// loginFile is what `gatekeeper login` keeps between runs: the issuer and
// client it signed in with, and the tokens.
type loginFile struct {
	Issuer   string        `json:"issuer"`
	ClientID string        `json:"client_id"`
	Scopes   []string      `json:"scopes"`
	Token    *oauth2.Token `json:"token"`
}

// refreshBefore is how long before its expiry a token is refreshed by
// -print-token: an agent's key helper is asked for a key now and then, and
// the token it prints must outlast the requests it starts.
const refreshBefore = time.Minute

// loginPath is the file the tokens are kept in: GATEKEEPER_LOGIN_FILE, else
// gatekeeper/login.json in the user's config directory.
func loginPath(getenv func(string) string) (string, error) {
	if p := getenv("GATEKEEPER_LOGIN_FILE"); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("finding the config directory for the sign-in file: %w (set GATEKEEPER_LOGIN_FILE)", err)
	}
	return filepath.Join(dir, "gatekeeper", "login.json"), nil
}

func runLogin(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("login", flag.ContinueOnError)
	fl.SetOutput(stderr)
	issuer := fl.String("issuer", getenv("GATEKEEPER_ISSUER"), "the identity provider's issuer URL (default $GATEKEEPER_ISSUER)")
	clientID := fl.String("client-id", getenv("GATEKEEPER_CLIENT_ID"), "the public client to sign in as (default $GATEKEEPER_CLIENT_ID)")
	scopes := fl.String("scopes", cmp.Or(getenv("GATEKEEPER_SCOPES"), strings.Join(config.DefaultScopes, " ")),
		"the scopes to ask for, space-separated (default $GATEKEEPER_SCOPES, else openid profile email offline_access)")
	printToken := fl.Bool("print-token", false, "print a valid access token (refreshed when it expires within a minute) and exit; for an agent's key helper")
	if err := fl.Parse(args); err != nil {
		return err
	}
	path, err := loginPath(getenv)
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	ctx = oidc.ClientContext(ctx, hc)
	if *printToken {
		return printAccessToken(ctx, path, stdout)
	}
	if *issuer == "" || *clientID == "" {
		return errors.New("login needs the identity provider: -issuer and -client-id (or GATEKEEPER_ISSUER and GATEKEEPER_CLIENT_ID); your platform team has them")
	}
	lf := &loginFile{Issuer: *issuer, ClientID: *clientID, Scopes: strings.Fields(*scopes)}
	p, conf, err := lf.provider(ctx)
	if err != nil {
		return err
	}
	if conf.Endpoint.DeviceAuthURL == "" {
		return fmt.Errorf("the identity provider %s offers no device authorization endpoint", lf.Issuer)
	}
	da, err := conf.DeviceAuth(ctx)
	if err != nil {
		return fmt.Errorf("starting the sign-in: %w", err)
	}
	fmt.Fprintf(stderr, "To sign in, open %s and enter the code %s\n", da.VerificationURI, da.UserCode)
	if da.VerificationURIComplete != "" {
		fmt.Fprintf(stderr, "(or open %s)\n", da.VerificationURIComplete)
	}
	fmt.Fprintln(stderr, "Waiting for you to sign in...")
	if !da.Expiry.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, da.Expiry)
		defer cancel()
	}
	tok, err := conf.DeviceAccessToken(ctx, da)
	if err != nil {
		return fmt.Errorf("signing in: %w", err)
	}
	lf.Token = tok
	if err := lf.save(path); err != nil {
		return err
	}
	who := "signed in"
	if raw, ok := tok.Extra("id_token").(string); ok {
		if it, err := p.Verifier(&oidc.Config{ClientID: lf.ClientID}).Verify(ctx, raw); err == nil {
			var c struct{ Email, Name string }
			if it.Claims(&c) == nil {
				who = "signed in as " + firstNonEmpty(c.Email, c.Name, it.Subject)
			}
		}
	}
	fmt.Fprintf(stderr, "%s; tokens kept in %s\n", who, path)
	return nil
}

// printAccessToken prints the kept access token, refreshed first when it
// expires within refreshBefore; the refreshed tokens are kept.
func printAccessToken(ctx context.Context, path string, stdout io.Writer) error {
	lf, err := readLogin(path)
	if err != nil {
		return err
	}
	_, conf, err := lf.provider(ctx)
	if err != nil {
		return err
	}
	old := *lf.Token
	cur := old
	if time.Until(cur.Expiry) < refreshBefore {
		cur.AccessToken = "" // makes the token source refresh
	}
	tok, err := conf.TokenSource(ctx, &cur).Token()
	if err != nil {
		return fmt.Errorf("your sign-in has expired or was revoked; run gatekeeper login: %w", err)
	}
	if tok.AccessToken != old.AccessToken {
		lf.Token = tok
		if err := lf.save(path); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintln(stdout, tok.AccessToken)
	return err
}

func runLogout(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	fl := flag.NewFlagSet("logout", flag.ContinueOnError)
	fl.SetOutput(stderr)
	if err := fl.Parse(args); err != nil {
		return err
	}
	path, err := loginPath(getenv)
	if err != nil {
		return err
	}
	lf, err := readLogin(path)
	if err != nil {
		return err
	}
	// The refresh token is revoked where the provider offers it, so that a
	// copy of the file is worth nothing; the file goes either way.
	revoked := lf.revoke(oidc.ClientContext(ctx, &http.Client{Timeout: 30 * time.Second}))
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if revoked != nil {
		fmt.Fprintf(stderr, "signed out; the provider did not confirm the refresh token's revocation: %v\n", revoked)
		return nil
	}
	fmt.Fprintln(stderr, "signed out")
	return nil
}

// provider reads the issuer's discovery document: the endpoints of the
// device grant, the token and the revocation.
func (lf *loginFile) provider(ctx context.Context) (*oidc.Provider, *oauth2.Config, error) {
	p, err := oidc.NewProvider(ctx, lf.Issuer)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the identity provider's discovery document: %w", err)
	}
	var extra struct {
		Device string `json:"device_authorization_endpoint"`
	}
	if err := p.Claims(&extra); err != nil {
		return nil, nil, fmt.Errorf("reading the identity provider's discovery document: %w", err)
	}
	ep := p.Endpoint()
	ep.DeviceAuthURL = extra.Device
	// A public client authenticates with its client_id in the form.
	ep.AuthStyle = oauth2.AuthStyleInParams
	return p, &oauth2.Config{ClientID: lf.ClientID, Endpoint: ep, Scopes: lf.Scopes}, nil
}

func (lf *loginFile) revoke(ctx context.Context) error {
	if lf.Token == nil || lf.Token.RefreshToken == "" {
		return nil
	}
	p, _, err := lf.provider(ctx)
	if err != nil {
		return err
	}
	var extra struct {
		Revocation string `json:"revocation_endpoint"`
	}
	if err := p.Claims(&extra); err != nil || extra.Revocation == "" {
		return errors.New("the provider offers no revocation endpoint")
	}
	form := url.Values{"token": {lf.Token.RefreshToken}, "token_type_hint": {"refresh_token"}, "client_id": {lf.ClientID}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, extra.Revocation, strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := oauth2.NewClient(ctx, nil).Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("revocation answered %s", resp.Status)
	}
	return nil
}

func readLogin(path string) (*loginFile, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errors.New("not signed in; run gatekeeper login")
	}
	if err != nil {
		return nil, err
	}
	var lf loginFile
	if err := json.Unmarshal(b, &lf); err != nil || lf.Token == nil || lf.Issuer == "" {
		return nil, fmt.Errorf("the sign-in file %s is damaged; run gatekeeper login again", path)
	}
	return &lf, nil
}

// save writes the file readable by its owner only, through a temporary
// file renamed over it, so that a reader never sees half of it.
func (lf *loginFile) save(path string) error {
	b, err := json.MarshalIndent(lf, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".login-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
