package relay

import (
	"net/http"
	"strings"
)

// hopHeaders are the hop-by-hop headers (RFC 9110 section 7.6.1, and the
// older ones proxies still meet): they describe one connection, never the
// message, and a proxy does not forward them.
var hopHeaders = []string{
	"Connection",
	"Proxy-Connection",
	"Keep-Alive",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",
	"Trailer",
	"Transfer-Encoding",
	"Upgrade",
}

// forwardingHeaders are what a client may claim about the hops before it;
// gatekeeper claims nothing of them to a provider.
var forwardingHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"}

// RemoveHopHeaders deletes from h the hop-by-hop headers and every header
// its Connection header names.
func RemoveHopHeaders(h http.Header) {
	for _, v := range h.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// OutgoingHeader is the header of a request sent on for a client whose
// request carried in: a copy of in less the hop-by-hop and forwarding
// headers. "Te: trailers" is kept, as it asks for the end-to-end
// trailers the reply may carry.
func OutgoingHeader(in http.Header) http.Header {
	out := in.Clone()
	if out == nil {
		out = http.Header{}
	}
	RemoveHopHeaders(out)
	for _, k := range forwardingHeaders {
		out.Del(k)
	}
	if teTrailers(in) {
		out.Set("Te", "trailers")
	}
	return out
}

// teTrailers reports whether h's Te header lists "trailers".
func teTrailers(h http.Header) bool {
	for _, v := range h.Values("Te") {
		for tok := range strings.SplitSeq(v, ",") {
			if tok, _, _ = strings.Cut(tok, ";"); strings.EqualFold(strings.TrimSpace(tok), "trailers") {
				return true
			}
		}
	}
	return false
}
