package trajectory

import (
	"strconv"
	"time"
)

// AppendJSON appends the event's JSON form to dst: what encoding/json
// writes for Event, byte for byte, when Data is compact and its strings
// escape < > & as encoding/json's own do (as all of gatekeeper's event
// data is), without reflection and without scanning Data again: the live
// event stream encodes each event of every store write. Data is written
// as it is; empty, it is left out. A time encoding/json refuses makes it
// return dst unchanged and encoding/json's error.
func (e *Event) AppendJSON(dst []byte) ([]byte, error) {
	var err error
	b := append(dst, `{"seq":`...)
	b = strconv.AppendInt(b, e.Seq, 10)
	b = append(b, `,"at":`...)
	b = appendTime(b, e.At, &err)
	b = append(b, `,"trajectory":`...)
	b = AppendJSONString(b, e.Trajectory)
	b = append(b, `,"type":`...)
	b = AppendJSONString(b, string(e.Type))
	b = appendOptString(b, `,"from":`, string(e.From))
	b = appendOptString(b, `,"to":`, string(e.To))
	b = appendOptString(b, `,"reason":`, e.Reason)
	if len(e.Data) > 0 {
		b = append(b, `,"data":`...)
		b = append(b, e.Data...)
	}
	b = append(b, '}')
	if err != nil {
		return dst, err
	}
	return b, nil
}

// AppendJSONTime appends t as time.Time.MarshalJSON writes it, or returns
// b unchanged and false for a time it refuses.
func AppendJSONTime(b []byte, t time.Time) ([]byte, bool) { return appendRFC3339(b, t) }
