package wire

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"gatekeeper/config"
)

// Keyring maps virtual keys to tenants. It holds only SHA-256 hashes, and a
// lookup compares the presented key's hash with every entry in constant
// time, so neither timing nor early exits tell which keys exist.
type Keyring struct {
	entries []keyEntry
	people  *people // nil unless people may sign in (people.go)
}

type keyEntry struct {
	hash   [32]byte
	tenant *config.Tenant
}

// NewKeyring holds the key hashes of every tenant's virtual keys.
func NewKeyring(tenants []config.Tenant) *Keyring {
	kr := &Keyring{}
	for i := range tenants {
		t := &tenants[i]
		for _, h := range t.KeyHashes() {
			kr.entries = append(kr.entries, keyEntry{hash: h, tenant: t})
		}
	}
	return kr
}

// Lookup returns the tenant of key and the key's hash, or nil.
func (kr *Keyring) Lookup(key string) (*config.Tenant, [32]byte) {
	h := sha256.Sum256([]byte(key))
	var found *config.Tenant
	for i := range kr.entries {
		if subtle.ConstantTimeCompare(h[:], kr.entries[i].hash[:]) == 1 {
			found = kr.entries[i].tenant
		}
	}
	return found, h
}

// HeaderKey is the header a virtual key may come in for every tenant, and
// must for a tenant whose agents send their own provider credential
// (tenants[].credentials: forward): the provider's auth headers then
// carry that credential. When it is sent, it alone names the tenant.
const HeaderKey = "X-Gatekeeper-Key"

// PresentedKey is the credential an agent sent: x-api-key (Anthropic SDKs,
// Claude Code), Authorization: Bearer (OpenAI SDKs, Codex,
// ANTHROPIC_AUTH_TOKEN), x-goog-api-key (Gemini SDKs, Gemini CLI), or the
// query's key (the Gemini API's other way), which ForwardQuery never
// forwards.
func PresentedKey(r *http.Request) string {
	if k := r.Header.Get("X-Api-Key"); k != "" {
		return k
	}
	const bearer = "bearer "
	if a := r.Header.Get("Authorization"); len(a) > len(bearer) && strings.EqualFold(a[:len(bearer)], bearer) {
		return strings.TrimSpace(a[len(bearer):])
	}
	if k := r.Header.Get("X-Goog-Api-Key"); k != "" {
		return k
	}
	return r.URL.Query().Get(queryKey)
}

// virtualKey is the virtual key r presents, and whether it came in
// HeaderKey: that header when sent, else the provider credential the
// agent sent (PresentedKey).
func virtualKey(r *http.Request) (string, bool) {
	if k := r.Header.Get(HeaderKey); k != "" {
		return k, true
	}
	return PresentedKey(r), false
}

// Credentials are the provider credentials r carries, each as the
// provider reads it: every x-api-key and x-goog-api-key value, every
// Authorization value (its token alone after a Bearer scheme) and every
// key query parameter. A tenant with credentials: forward sends them on
// unchanged; gatekeeper keeps them only in memory, to redact them from
// the provider's error replies.
func Credentials(r *http.Request) []string {
	var out []string
	add := func(v string) {
		if v = strings.TrimSpace(v); v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	for _, v := range r.Header.Values("X-Api-Key") {
		add(v)
	}
	for _, v := range r.Header.Values("Authorization") {
		if scheme, token, ok := strings.Cut(strings.TrimSpace(v), " "); ok && strings.EqualFold(scheme, "bearer") {
			v = token
		}
		add(v)
	}
	for _, v := range r.Header.Values("X-Goog-Api-Key") {
		add(v)
	}
	for _, v := range queryValues(r.URL.RawQuery, queryKey) {
		add(v)
	}
	return out
}

// queryValues are the values of every parameter of rawQuery named name,
// however its name was escaped; a value that does not unescape is taken
// as it is written.
func queryValues(rawQuery, name string) []string {
	var out []string
	for part := range strings.SplitSeq(rawQuery, "&") {
		n, v, _ := strings.Cut(part, "=")
		if un, err := url.QueryUnescape(n); err == nil {
			n = un
		}
		if n != name {
			continue
		}
		if uv, err := url.QueryUnescape(v); err == nil {
			v = uv
		}
		out = append(out, v)
	}
	return out
}

// QueryCredential is the part of rawQuery that carries a provider key
// (its key parameters, as the agent spelled them), "" when none: a
// forward tenant's held turn continues with a query of gatekeeper's own,
// to which its agent's key is added.
func QueryCredential(rawQuery string) string {
	var kept []string
	for part := range strings.SplitSeq(rawQuery, "&") {
		name, _, _ := strings.Cut(part, "=")
		if n, err := url.QueryUnescape(name); err == nil && n == queryKey || name == queryKey {
			kept = append(kept, part)
		}
	}
	return strings.Join(kept, "&")
}

// queryKey is the query parameter the Gemini API takes a key in.
const queryKey = "key"

// ForwardQuery is the query rawQuery goes to a provider with: without any
// key parameter, which carries the agent's virtual key (the provider key
// goes in a header). The other parameters stay as the agent spelled
// them.
func ForwardQuery(rawQuery string) string {
	if !strings.Contains(rawQuery, queryKey) && !strings.Contains(rawQuery, "%") {
		return rawQuery
	}
	var kept []string
	for part := range strings.SplitSeq(rawQuery, "&") {
		name, _, _ := strings.Cut(part, "=")
		if n, err := url.QueryUnescape(name); err == nil && n == queryKey || name == queryKey {
			continue
		}
		kept = append(kept, part)
	}
	return strings.Join(kept, "&")
}
