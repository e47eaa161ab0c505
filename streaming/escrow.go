package streaming

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"gatekeeper/streaming/sse"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming/internal/jsonscan"
)

// Reshaping a held reply for the escrow.
//
// A reply whose tool call waits for approval is kept whole by the proxy.
// When the decision comes the reply goes out in the form the agent asked
// for last, which may not be the form it came in (an agent that gave up on
// a silent stream retries without streaming): AssembleJSON and RenderSSE
// turn one into the other. A refused call is answered by calling the model
// again with the refusal as the call's result (Continuation), and the two
// replies are joined into the one reply the agent reads (SpliceStream,
// SpliceJSON).
//
// These work on whole replies the proxy already holds in memory, bounded
// by its own limit, so unlike the filter they may copy and allocate; they
// still edit JSON member by member and never re-encode what they pass on.

// ErrIncompleteStream is returned when a stream has no stop or terminal
// event, so no whole reply can be built from it.
var ErrIncompleteStream = errors.New("streaming: stream has no stop event")

// RefuseCalls makes the filter refuse the client tool calls with these ids
// as allow=false refuses a name (replaced by the refusal text, stop reason
// fixed). Call before the first AppendEvent or Body.
func (f *CallFilter) RefuseCalls(ids ...string) {
	for _, id := range ids {
		if id != "" && !slices.Contains(f.refuseIDs, id) {
			f.refuseIDs = append(f.refuseIDs, id)
		}
	}
}

// streamEvent is one event of a whole stream, copied out of the Reader.
type streamEvent struct {
	name    string // the event line's value
	data    string // the data lines joined
	raw     []byte // the event's bytes as they came
	hasData bool
}

// readEvents splits a whole stream into its events.
func readEvents(stream []byte) ([]streamEvent, error) {
	var evs []streamEvent
	err := sse.Each(stream, func(ev *sse.Event) error {
		evs = append(evs, streamEvent{
			name: string(ev.Name), data: string(ev.Data), raw: bytes.Clone(ev.Raw), hasData: ev.HasData,
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return evs, nil
}

// jsonEvent reads an event's data as a JSON object: ok is false for an
// event without data; an event whose data is not a JSON object fails.
func (e *streamEvent) jsonEvent(api API) (js string, ok bool, err error) {
	if !e.hasData {
		return "", false, nil
	}
	if !jsonscan.IsObject(e.data) || !gjson.Valid(e.data) {
		return "", false, fmt.Errorf("%w: %s event %.64q", ErrInvalidJSON, api, e.data)
	}
	return e.data, true, nil
}

// maxUsageDepth bounds the nesting sumUsage follows.
const maxUsageDepth = 8

// sumUsage adds two usage objects member by member: numbers are summed,
// objects summed in turn, any other value taken from b when b has it (and
// it is not null), else from a. Either may be empty or null. Members keep
// a's order, b's new ones follow.
func sumUsage(a, b string) string {
	if !jsonscan.IsObject(a) {
		if jsonscan.IsObject(b) {
			return b
		}
		return a
	}
	if !jsonscan.IsObject(b) {
		return a
	}
	return string(sumObjects(nil, a, b, 0))
}

func sumObjects(dst []byte, a, b string, depth int) []byte {
	var keys []string
	vals := [2]map[string]string{{}, {}} // the first member of each key, in a and in b
	for n, obj := range []string{a, b} {
		for m, next, ok := jsonscan.NextMember(obj, jsonscan.ObjectStart(obj)); ok; m, next, ok = jsonscan.NextMember(obj, next) {
			if _, dup := vals[n][m.Key]; dup {
				continue
			}
			vals[n][m.Key] = m.Val
			if _, inA := vals[0][m.Key]; n == 0 || !inA {
				keys = append(keys, m.Key)
			}
		}
	}
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '"')
		dst = append(dst, k...)
		dst = append(dst, '"', ':')
		dst = sumValue(dst, vals[0][k], vals[1][k], depth)
	}
	return append(dst, '}')
}

func sumValue(dst []byte, va, vb string, depth int) []byte {
	switch {
	case jsonscan.IsNumber(va) && jsonscan.IsNumber(vb):
		x, errA := strconv.ParseInt(va, 10, 64)
		y, errB := strconv.ParseInt(vb, 10, 64)
		if errA == nil && errB == nil {
			return strconv.AppendInt(dst, x+y, 10)
		}
		return strconv.AppendFloat(dst, gjson.Parse(va).Float()+gjson.Parse(vb).Float(), 'g', -1, 64)
	case jsonscan.IsObject(va) && jsonscan.IsObject(vb) && depth < maxUsageDepth:
		return sumObjects(dst, va, vb, depth+1)
	case vb != "" && vb != "null":
		return append(dst, vb...)
	case va != "":
		return append(dst, va...)
	}
	return append(dst, "null"...)
}
