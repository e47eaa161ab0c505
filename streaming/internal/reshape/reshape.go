package reshape

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/sse"
)

// Event is one event of a whole stream, copied out of the Reader.
type Event struct {
	Name    string // the event line's value
	Data    string // the data lines joined
	Raw     []byte // the event's bytes as they came
	HasData bool
}

// ReadEvents splits a whole stream into its events. It cannot fail:
// sse.Each fails only when its callback does or an event outgrows the
// stream, and neither happens here.
func ReadEvents(stream []byte) []Event {
	var evs []Event
	_ = sse.Each(stream, func(ev *sse.Event) error {
		evs = append(evs, Event{
			Name: string(ev.Name), Data: string(ev.Data), Raw: bytes.Clone(ev.Raw), HasData: ev.HasData,
		})
		return nil
	})
	return evs
}

// JSON reads an event's data as a JSON object: ok is false for an event
// without data; an event whose data is not a JSON object fails.
func (e *Event) JSON(api streaming.API) (js string, ok bool, err error) {
	if !e.HasData {
		return "", false, nil
	}
	if !jsonscan.IsObject(e.Data) || !gjson.Valid(e.Data) {
		return "", false, fmt.Errorf("%w: %s event %.64q", streaming.ErrInvalidJSON, api, e.Data)
	}
	return e.Data, true, nil
}

// AppendCont appends an event of a continuation as it came, less a byte
// order mark: it is not the first thing in the stream.
func AppendCont(dst []byte, e *Event) []byte {
	return append(dst, sse.TrimBOM(e.Raw)...)
}

// maxUsageDepth bounds the nesting SumUsage follows.
const maxUsageDepth = 8

// SumUsage adds two usage objects member by member: numbers are summed,
// objects summed in turn, any other value taken from b when b has it (and
// it is not null), else from a. Either may be empty or null. Members keep
// a's order, b's new ones follow.
func SumUsage(a, b string) string {
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

// ReplyObject returns a whole reply body of api, less surrounding
// whitespace, as a string viewing body's bytes; a body that is not a valid
// JSON object fails with an error wrapping streaming.ErrInvalidJSON.
func ReplyObject(api streaming.API, body []byte) (string, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' || !gjson.ValidBytes(trimmed) {
		return "", fmt.Errorf("%w: %s reply body", streaming.ErrInvalidJSON, api)
	}
	return jsonscan.View(trimmed), nil
}

// SpliceJSON reads first and cont as whole reply bodies of api and joins
// them with join (a dialect's streaming.Dialect.SpliceJSON).
func SpliceJSON(api streaming.API, first, cont []byte, join func(first, cont string) []byte) ([]byte, error) {
	fs, err := ReplyObject(api, first)
	if err != nil {
		return nil, err
	}
	cs, err := ReplyObject(api, cont)
	if err != nil {
		return nil, err
	}
	return join(fs, cs), nil
}

// Rendering a whole reply as a stream: an agent that asked for a stream
// and re-attached to a held turn whose reply was kept as a body gets the
// reply in the grammar it asked for: every block or item opened, its
// content in one delta, closed, then the stop.

// Render is a dialect's streaming.Dialect.RenderSSE: body read as a reply
// object, which is must accept (else an error wrapping
// streaming.ErrInvalidJSON saying it is not a what), rendered by render,
// and the stream checked by streaming.CheckRendered.
func Render(d streaming.Dialect, body []byte, what string, is func(r gjson.Result) bool, render func(s string, r gjson.Result) []byte) ([]byte, error) {
	s, err := ReplyObject(d.API(), body)
	if err != nil {
		return nil, err
	}
	r := gjson.Parse(s)
	if !is(r) {
		return nil, fmt.Errorf("%w: not %s", streaming.ErrInvalidJSON, what)
	}
	return streaming.CheckRendered(d, render(s, r))
}
