package streaming

// Internals the external tests check against.
const (
	MaxUnparsedErrors = maxUnparsedErrors
	MaxNesting        = maxNesting
	MaxCanonicalDepth = maxCanonicalDepth
	BillingPrefix     = billingPrefix
)

var (
	SumUsage = sumUsage
)

func (f *CallFilter) IsCut(id string) bool { return f.isCut(id) }
