package admin

import (
	_ "embed"
	"net/http"
)

// The admin API's contract: an OpenAPI 3.1 document of every route under
// /admin/v1, and the JSON Schema (2020-12) of the live event stream's
// events, which refers to the document's schemas. Both are served as they
// are kept here, to any caller: they describe the API and hold nothing of
// a deployment.
var (
	//go:embed openapi.json
	openAPIDoc []byte
	//go:embed events.schema.json
	eventsSchema []byte
)

// OpenAPI returns the OpenAPI document served at /admin/v1/openapi.json.
func OpenAPI() []byte { return openAPIDoc }

// EventsSchema returns the JSON Schema of the stream's events, served at
// /admin/v1/events.schema.json.
func EventsSchema() []byte { return eventsSchema }

// document serves b, needing no token.
func document(b []byte, contentType string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(b)
	}
}
