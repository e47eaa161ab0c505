// Package console serves the operator console: one page of hand-written
// HTML, CSS and JavaScript embedded in the binary, with no build step and
// nothing fetched from anywhere but gatekeeper itself. The page signs in
// with an admin token it keeps in the tab's sessionStorage (never in a
// URL or a cookie) and talks only to the admin API, whose role checks
// stay the authority: the console merely hides what a token may not do.
package console

import (
	"embed"
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
// redirect to it.
func Routes(r chi.Router) {
	h := Handler()
	r.Method(http.MethodGet, Path+"*", h)
	r.Method(http.MethodHead, Path+"*", h)
	r.Get("/console", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Path, http.StatusMovedPermanently)
	})
}
