package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
)

// KeyHashPrefix marks a virtual key given by its SHA-256 instead of itself.
const KeyHashPrefix = "sha256:"

var (
	errEmptyKey   = errors.New("empty")
	errKeyHashHex = errors.New(`must be "sha256:" followed by 64 lowercase hex digits`)
)

// HashKey is the hash a presented virtual key is compared by.
func HashKey(key string) [32]byte { return sha256.Sum256([]byte(key)) }

// keyHash returns the hash of a configured virtual key in either form.
func keyHash(k string) ([32]byte, error) {
	if k == "" {
		return [32]byte{}, errEmptyKey
	}
	hexed, ok := strings.CutPrefix(k, KeyHashPrefix)
	if !ok {
		return HashKey(k), nil
	}
	var h [32]byte
	if len(hexed) != 2*len(h) || strings.ToLower(hexed) != hexed {
		return h, errKeyHashHex
	}
	if _, err := hex.Decode(h[:], []byte(hexed)); err != nil {
		return h, errKeyHashHex
	}
	return h, nil
}

// KeyHashes returns the SHA-256 of each of the tenant's virtual keys, so a
// presented key can be hashed and compared in constant time without any plain
// key being kept. Empty and malformed entries, which Validate rejects, are
// left out: an empty key must never match an agent that sent none.
func (t Tenant) KeyHashes() [][32]byte {
	out := make([][32]byte, 0, len(t.Keys))
	for _, k := range t.Keys {
		if h, err := keyHash(k); err == nil {
			out = append(out, h)
		}
	}
	return out
}
