package admin

import (
	"crypto/subtle"
	"net/http"

	"gatekeeper/approvals"
)

// CSRFHeader carries a console session's CSRF token on every call that
// changes something: a cookie rides along with any request the browser
// makes to gatekeeper, this header only with the console page's own.
const CSRFHeader = "X-Gatekeeper-CSRF"

// Principal is the person a console session signed in: the admin caller a
// request carrying its cookie acts as.
type Principal struct {
	// Name is who the person acts as in records and events.
	Name  string
	Roles []string
	// Tenants are the only tenants the person sees; nil: every tenant.
	Tenants []string
	// Person is what the provider said of them, for approvals.people.
	Person approvals.SignedIn
	// CSRF is the token the session's state-changing calls must carry in
	// CSRFHeader.
	CSRF string
}

// Sessions finds the console session a request carries.
type Sessions interface {
	// Principal returns the session's person; false when the request
	// carries no live session. An error is the session store's failure.
	Principal(r *http.Request) (Principal, bool, error)
}

// WithSessions lets requests without a bearer token authenticate with a
// console session's cookie (the console's sign-in through the identity
// provider). Bearer tokens keep working beside it.
func WithSessions(s Sessions) Option {
	return func(a *API) { a.sessions = s }
}

// safeMethod reports the methods that change nothing, which need no CSRF
// token.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// checkCSRF refuses a state-changing call of a session that does not
// carry the session's CSRF token.
func checkCSRF(r *http.Request, c caller) error {
	if c.session == nil || safeMethod(r.Method) {
		return nil
	}
	got := r.Header.Get(CSRFHeader)
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(c.session.CSRF)) != 1 {
		return &Error{Code: http.StatusForbidden, Type: "permission_error", Msg: "this call needs the session's CSRF token in " + CSRFHeader}
	}
	return nil
}
