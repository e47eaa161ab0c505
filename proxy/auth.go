package proxy

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"gatekeeper/config"
	"gatekeeper/proxy/internal/wire"
)

// keyring maps virtual keys to tenants. It holds only SHA-256 hashes, and a
// lookup compares the presented key's hash with every entry in constant
// time, so neither timing nor early exits tell which keys exist.
type keyring struct {
	entries []keyEntry
}

type keyEntry struct {
	hash   [32]byte
	tenant *config.Tenant
}

func newKeyring(tenants []config.Tenant) *keyring {
	kr := &keyring{}
	for i := range tenants {
		t := &tenants[i]
		for _, h := range t.KeyHashes() {
			kr.entries = append(kr.entries, keyEntry{hash: h, tenant: t})
		}
	}
	return kr
}

// lookup returns the tenant of key and the key's hash, or nil.
func (kr *keyring) lookup(key string) (*config.Tenant, [32]byte) {
	h := sha256.Sum256([]byte(key))
	var found *config.Tenant
	for i := range kr.entries {
		if subtle.ConstantTimeCompare(h[:], kr.entries[i].hash[:]) == 1 {
			found = kr.entries[i].tenant
		}
	}
	return found, h
}

// presentedKey is the credential an agent sent: x-api-key (Anthropic SDKs,
// Claude Code) or Authorization: Bearer (OpenAI SDKs, Codex,
// ANTHROPIC_AUTH_TOKEN).
func presentedKey(r *http.Request) string {
	if k := r.Header.Get("X-Api-Key"); k != "" {
		return k
	}
	const bearer = "bearer "
	if a := r.Header.Get("Authorization"); len(a) > len(bearer) && strings.EqualFold(a[:len(bearer)], bearer) {
		return strings.TrimSpace(a[len(bearer):])
	}
	return ""
}

func canonicalPath(escaped string) (string, error) { return wire.CanonicalPath(escaped) }

func setBody(r *http.Request, body []byte) { wire.SetBody(r, body) }

func stripAgentHeaders(h http.Header) { wire.StripAgentHeaders(h) }

func passAllowlist(p *config.Provider) []config.Passthrough { return wire.Allowlist(p) }
