package proxy

import (
	"net/http"

	"gatekeeper/streaming"
	"gatekeeper/streaming/anthropic"
	"gatekeeper/streaming/chat"
	"gatekeeper/streaming/responses"
)

// dialect is what the proxy needs of one turn API: the streaming dialect
// that reads and writes its bodies and errors, and beyond that where its
// turns are routed, which request members carry the output limit
// and name a held turn, and which of the request checks apply to it.
type dialect struct {
	api      streaming.API
	stream   streaming.Dialect
	provider string // the providers' config api that serves it
	path     string // the turn's route below the provider's prefix
	// outputField is where a request takes the output limit the agent did
	// not set.
	outputField string
	// turnFields are the request members a held turn's key hashes: the
	// conversation and the tools, nothing a retry may change.
	turnFields []string
	// askUsage is set when a stream carries usage only if the request asks
	// for it (stream_options.include_usage), which gatekeeper then does.
	askUsage bool
	// thinking is set when a request may carry an extended-thinking budget
	// (thinking.budget_tokens) that must stay below its output limit.
	thinking bool
	// background is set when a request may ask to run in the background
	// (background: true), its output fetched later by a route no turn
	// meters.
	background bool
	// hostedMCP is set when a request may declare hosted MCP tools, which
	// the provider calls without the agent: a tenant may refuse them.
	hostedMCP bool
}

// dialects is the one table of the turn APIs gatekeeper serves; a provider
// family's first entry gives the error format of its other routes, and the
// table's first entry that of a request no provider claims.
var dialects = []*dialect{
	{
		api: streaming.APIAnthropic, stream: anthropic.Dialect{}, provider: "anthropic", path: "/v1/messages",
		outputField: "max_tokens",
		turnFields:  []string{"system", "messages", "tools"},
		thinking:    true,
	},
	{
		api: streaming.APIChat, stream: chat.Dialect{}, provider: "openai", path: "/v1/chat/completions",
		outputField: "max_completion_tokens",
		turnFields:  []string{"messages", "tools"},
		askUsage:    true,
	},
	{
		api: streaming.APIResponses, stream: responses.Dialect{}, provider: "openai", path: "/v1/responses",
		outputField: "max_output_tokens",
		turnFields:  []string{"instructions", "input", "previous_response_id", "tools"},
		background:  true,
		hostedMCP:   true,
	},
}

// dialectOf is api's entry in dialects. Every API the proxy handles came
// from the table, so an unknown one is a bug: it panics.
func dialectOf(api streaming.API) *dialect {
	for _, d := range dialects {
		if d.api == api {
			return d
		}
	}
	panic("proxy: no dialect for API " + string(api))
}

// streamOf is the streaming dialect of api, which reads and writes its
// bodies.
func streamOf(api streaming.API) streaming.Dialect { return dialectOf(api).stream }

// turnDialect is the dialect of a turn route of provider family provider,
// or nil when the route is not a turn.
func turnDialect(provider, method, rest string) *dialect {
	if method != http.MethodPost {
		return nil
	}
	for _, d := range dialects {
		if d.provider == provider && d.path == rest {
			return d
		}
	}
	return nil
}

// familyDialect is the first dialect of provider family provider, whose
// error format its other routes answer in; nil for an unknown family.
func familyDialect(provider string) *dialect {
	for _, d := range dialects {
		if d.provider == provider {
			return d
		}
	}
	return nil
}
