package streaming

// Internals the external tests check against.
const (
	MaxCanonicalDepth = maxCanonicalDepth
)

// IsCut reports whether the filter's engine found the call with id cut
// at the output limit of a whole reply.
func (f *CallFilter) IsCut(id string) bool { return f.e.(interface{ IsCut(string) bool }).IsCut(id) }
