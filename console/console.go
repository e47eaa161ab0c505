// Package console serves the operator console: one page of hand-written
// HTML, CSS and JavaScript embedded in the binary, with no build step and
// nothing fetched from anywhere but gatekeeper itself. A person signs in
// through the company's identity provider (signin.go: authorization code
// with PKCE, a server-side session behind an HttpOnly cookie), or with an
// admin token the page keeps in the tab's sessionStorage (never in a URL
// or a cookie). The page talks only to the admin API, whose role checks
// stay the authority: the console merely hides what a caller may not do.
package console

import (
	"embed"
	"fmt"
	"io/fs"
	"net/http"

	"github.com/go-chi/chi/v5"
)

//go:embed assets
var assets embed.FS

// Path is where the console is served.
const Path = "/console/"

// securityHeaders keep the page to its own origin: scripts, styles and
// connections from gatekeeper only, no framing, no referrer (a run id in
// the fragment stays in the tab).
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
		"base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	"X-Content-Type-Options": "nosniff",
	"Referrer-Policy":        "no-referrer",
	"X-Frame-Options":        "DENY",
	"Cache-Control":          "no-cache",
}

// Handler serves the embedded assets under Path.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the directory is embedded above
	}
	files := http.StripPrefix(Path, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range securityHeaders {
			w.Header().Set(k, v)
		}
		files.ServeHTTP(w, r)
	})
}

// Routes mounts the console at Path, and /console without the slash as a
// redirect to it; with signIn (nil: bearer tokens only), its sign-in
// through the identity provider. SignInInfoPath tells the page which.
func Routes(r chi.Router, signIn *SignIn) {
	h := Handler()
	r.Get(SignInInfoPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, "{\"identity_provider\": %t}\n", signIn != nil)
	})
	if signIn != nil {
		r.Get(LoginPath, signIn.login)
		r.Get(CallbackPath, signIn.callback)
		r.Post(LogoutPath, signIn.logout)
	}
	r.Method(http.MethodGet, Path+"*", h)
	r.Method(http.MethodHead, Path+"*", h)
	r.Get("/console", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Path, http.StatusMovedPermanently)
	})
}
