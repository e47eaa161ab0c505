package wire

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"net/url"
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
