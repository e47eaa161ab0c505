package streaming

import (
	"bytes"

	"github.com/tidwall/gjson"
)

// Extras are what a reply says about its price beyond Usage: the part of
// its cache writes kept for an hour (Anthropic usage.cache_creation), and
// the service tier that served it (Anthropic usage.service_tier; OpenAI
// service_tier, "priority", "flex"...).
type Extras struct {
	CacheWrite1hTokens int64
	ServiceTier        string
}

// Read updates x from one event's data, or from a whole non-streamed
// reply, reading the objects at the gjson paths where the dialect's usage
// and tier live. The last report of the 1-hour writes wins, as usage's
// does; the first tier named stays. Data that says neither, or is not
// JSON, leaves x as it was: usage itself is the decoders' to read.
func (x *Extras) Read(data []byte, paths ...string) {
	hour := bytes.Contains(data, []byte(`ephemeral_1h_input_tokens`))
	tier := x.ServiceTier == "" && bytes.Contains(data, []byte(`service_tier`))
	if !hour && !tier {
		return
	}
	for _, p := range paths {
		obj := gjson.GetBytes(data, p)
		if !obj.IsObject() {
			continue
		}
		if n := obj.Get("cache_creation.ephemeral_1h_input_tokens"); hour && n.Type == gjson.Number && n.Int() >= 0 {
			x.CacheWrite1hTokens = n.Int()
		}
		if s := obj.Get("service_tier"); tier && s.Type == gjson.String && s.Str != "" && len(s.Str) <= 64 {
			x.ServiceTier = s.Str
			tier = false
		}
	}
}
