package dialect

import (
	"net/http"

	"gatekeeper/streaming"
	"gatekeeper/streaming/anthropic"
	"gatekeeper/streaming/chat"
	"gatekeeper/streaming/gemini"
	"gatekeeper/streaming/responses"
)

// Spec is what the proxy needs of one turn API: the streaming dialect
// that reads and writes its bodies and errors, and beyond that where its
// turns are routed, which request members carry the output limit
// and name a held turn, and which of the request checks apply to it.
type Spec struct {
	API      streaming.API
	Stream   streaming.Dialect
	Provider string // the providers' config api that serves it
	Path     string // the turn's route below the provider's prefix
	// Route, when set, reads the turn's route instead of Path, for an
	// API whose path names the model and whether the reply streams: ok
	// when rest is a turn. RouteOf is its inverse, the path and query of
	// a turn of model (a continuation's).
	Route   func(rest string) (model string, stream, ok bool)
	RouteOf func(model string, stream bool) (rest, query string)
	// OutputField is where a request takes the output limit the agent did
	// not set.
	OutputField string
	// TurnFields are the request members a held turn's key hashes: the
	// conversation and the tools, nothing a retry may change.
	TurnFields []string
	// AskUsage is set when a stream carries usage only if the request asks
	// for it (stream_options.include_usage), which gatekeeper then does.
	AskUsage bool
	// Thinking is set when a request may carry an extended-thinking budget
	// (thinking.budget_tokens) that must stay below its output limit.
	Thinking bool
	// Background is set when a request may ask to run in the background
	// (background: true), its output fetched later by a route no turn
	// meters.
	Background bool
	// HostedMCP is set when a request may declare hosted MCP tools, which
	// the provider calls without the agent: a tenant may refuse them.
	HostedMCP bool
}

// table is the one table of the turn APIs gatekeeper serves; a provider
// family's first entry gives the error format of its other routes, and the
// table's first entry that of a request no provider claims.
var table = []*Spec{
	{
		API: streaming.APIAnthropic, Stream: anthropic.Dialect{}, Provider: "anthropic", Path: "/v1/messages",
		OutputField: "max_tokens",
		TurnFields:  []string{"system", "messages", "tools"},
		Thinking:    true,
	},
	{
		API: streaming.APIChat, Stream: chat.Dialect{}, Provider: "openai", Path: "/v1/chat/completions",
		OutputField: "max_completion_tokens",
		TurnFields:  []string{"messages", "tools"},
		AskUsage:    true,
	},
	{
		API: streaming.APIResponses, Stream: responses.Dialect{}, Provider: "openai", Path: "/v1/responses",
		OutputField: "max_output_tokens",
		TurnFields:  []string{"instructions", "input", "previous_response_id", "tools"},
		Background:  true,
		HostedMCP:   true,
	},
	{
		API: streaming.APIGemini, Stream: gemini.Dialect{}, Provider: "gemini", Route: gemini.TurnPath, RouteOf: gemini.TurnRest,
		OutputField: "generationConfig." + gemini.OutputField,
		TurnFields:  []string{"systemInstruction", "system_instruction", "contents", "tools"},
	},
}

// Of is api's entry in the table. Every API the proxy handles came from
// the table, so an unknown one is a bug: it panics.
func Of(api streaming.API) *Spec {
	for _, d := range table {
		if d.API == api {
			return d
		}
	}
	panic("dialect: no dialect for API " + string(api))
}

// Stream is the streaming dialect of api, which reads and writes its
// bodies.
func Stream(api streaming.API) streaming.Dialect { return Of(api).Stream }

// Turn is the dialect of a turn route of provider family provider, or
// nil when the route is not a turn.
func Turn(provider, method, rest string) *Spec {
	if method != http.MethodPost {
		return nil
	}
	for _, d := range table {
		if d.Provider != provider {
			continue
		}
		if d.Route != nil {
			if _, _, ok := d.Route(rest); ok {
				return d
			}
			continue
		}
		if d.Path == rest {
			return d
		}
	}
	return nil
}

// Rest is the path and query of a turn of d for model: Path and none,
// unless the route names the model (RouteOf).
func (d *Spec) Rest(model string, stream bool) (rest, query string) {
	if d.RouteOf != nil {
		return d.RouteOf(model, stream)
	}
	return d.Path, ""
}

// Family is the first dialect of provider family provider, whose error
// format its other routes answer in; nil for an unknown family.
func Family(provider string) *Spec {
	for _, d := range table {
		if d.Provider == provider {
			return d
		}
	}
	return nil
}

// Unclaimed is the dialect a request no provider claims is answered in:
// the table's first.
func Unclaimed() *Spec { return table[0] }
