package streaming

import (
	"encoding/binary"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/tidwall/gjson"

	"gatekeeper/streaming/internal/jsonscan"
)

// Digests of tool calls and tool results, for the loop watchdog: equal
// calls and equal results must give equal digests on every replica, so
// the digest is xxhash64, never a per-process seeded hash. Zero is kept
// for "no content".

// CallDigest digests a tool call: its name and its input in canonical form
// (object keys sorted, a key given twice, or two keys equal under simple
// case folding, keeping the last value as the providers' decoders and Go's
// encoding/json do, whitespace and escapes not counted, numbers as
// written), so that the same call written with its keys in another order
// or spaced differently digests the same. An input that is not one JSON
// value (a custom tool's free text) is digested as it is. Values nested
// deeper than maxCanonicalDepth are digested as written.
func CallDigest(name string, args []byte) uint64 {
	h := xxhash.New()
	writeString(h, name)
	if gjson.ValidBytes(args) {
		_, _ = h.Write([]byte{'j'})
		writeCanonical(h, gjson.ParseBytes(args), 0)
	} else {
		_, _ = h.Write([]byte{'r'})
		_, _ = h.Write(args) // a hash's Write never fails
	}
	return nonZero(h.Sum64())
}

// maxCanonicalDepth bounds the recursion of writeCanonical.
const maxCanonicalDepth = 128

// member is one object member, for sorting.
type member struct {
	key string
	val gjson.Result
}

// writeCanonical feeds v to h in a form that does not depend on member
// order, whitespace or string escapes: a type tag, then lengths before
// every string so that no two values share a form.
func writeCanonical(h *xxhash.Digest, v gjson.Result, depth int) {
	switch {
	case depth > maxCanonicalDepth:
		_, _ = h.Write([]byte{'x'})
		writeString(h, v.Raw)
	case v.IsObject():
		var buf [16]member
		ms := buf[:0]
		v.ForEach(func(k, val gjson.Result) bool {
			ms = append(ms, member{k.Str, val})
			return true
		})
		ms = lastOfFolded(ms)
		slices.SortStableFunc(ms, func(a, b member) int { return strings.Compare(a.key, b.key) })
		_, _ = h.Write([]byte{'{'})
		for _, m := range ms {
			writeString(h, m.key)
			writeCanonical(h, m.val, depth+1)
		}
		_, _ = h.Write([]byte{'}'})
	case v.IsArray():
		_, _ = h.Write([]byte{'['})
		v.ForEach(func(_, e gjson.Result) bool {
			writeCanonical(h, e, depth+1)
			return true
		})
		_, _ = h.Write([]byte{']'})
	case v.Type == gjson.String:
		_, _ = h.Write([]byte{'s'})
		writeString(h, v.Str)
	case v.Type == gjson.Number:
		_, _ = h.Write([]byte{'n'})
		writeString(h, v.Raw)
	case v.Type == gjson.True:
		_, _ = h.Write([]byte{'t'})
	case v.Type == gjson.False:
		_, _ = h.Write([]byte{'f'})
	default:
		_, _ = h.Write([]byte{'0'})
	}
}

// lastOfFolded keeps, of members whose keys are equal under simple case
// folding, the last (as Go's encoding/json, which matches keys so, and
// the providers' decoders, which keep the last of equal keys, read them),
// in their order. An object without such keys is returned as it is.
func lastOfFolded(ms []member) []member {
	dup := false
	if len(ms) <= 32 {
		for i := 0; i < len(ms) && !dup; i++ {
			for j := i + 1; j < len(ms); j++ {
				if strings.EqualFold(ms[i].key, ms[j].key) {
					dup = true
					break
				}
			}
		}
	} else {
		dup = true // wide objects take the map below
	}
	if !dup {
		return ms
	}
	last := make(map[string]int, len(ms))
	for i, m := range ms {
		last[jsonscan.Fold(m.key)] = i
	}
	out := ms[:0:0]
	for i, m := range ms {
		if last[jsonscan.Fold(m.key)] == i {
			out = append(out, m)
		}
	}
	return out
}

// writeString feeds s to h after its length.
func writeString(h *xxhash.Digest, s string) {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
	_, _ = h.Write(n[:])
	_, _ = h.WriteString(s)
}

func nonZero(d uint64) uint64 {
	if d == 0 {
		return 1
	}
	return d
}
