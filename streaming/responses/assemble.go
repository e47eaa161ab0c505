package responses

import (
	"fmt"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/reshape"
)

// assembleJSON turns a whole stream into the Response it carries, the
// terminal event's (streaming.Dialect.AssembleJSON).
func assembleJSON(stream []byte) ([]byte, error) {
	resp, _, err := terminal(reshape.ReadEvents(stream))
	if err != nil {
		return nil, err
	}
	return []byte(resp), nil
}

// terminal finds the terminal event of a Responses stream and
// returns its response object and the event's position.
func terminal(evs []reshape.Event) (resp string, at int, err error) {
	for i := range evs {
		js, ok, err := evs[i].JSON(streaming.APIResponses)
		if err != nil {
			return "", -1, err
		}
		if !ok {
			continue
		}
		switch gjson.Get(js, "type").Str {
		case "response.completed", "response.incomplete", "response.failed":
			r := gjson.Get(js, "response")
			if !r.IsObject() || !r.Get("output").IsArray() {
				return "", -1, fmt.Errorf("%w: responses terminal event without a response", streaming.ErrInvalidJSON)
			}
			return r.Raw, i, nil
		}
	}
	return "", -1, streaming.ErrIncompleteStream
}
