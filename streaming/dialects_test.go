package streaming_test

import (
	. "gatekeeper/streaming"
	"gatekeeper/streaming/anthropic"
	"gatekeeper/streaming/chat"
	"gatekeeper/streaming/responses"
)

// The tests of the streaming tree that span the three APIs run here, in an
// external package, and reach each API through its Dialect as the proxy
// does: dialects is their table of the dialects, as the proxy's is.
var dialects = map[API]Dialect{
	APIAnthropic: anthropic.Dialect{},
	APIChat:      chat.Dialect{},
	APIResponses: responses.Dialect{},
}
