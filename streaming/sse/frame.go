package sse

import "bytes"

// KeepBOM keeps the byte order mark of the stream's first event on the events
// that replace it.
func KeepBOM(dst []byte, ev *Event) []byte {
	if bytes.HasPrefix(ev.Raw, bom) {
		dst = append(dst, bom...)
	}
	return dst
}

// AppendFrame appends one event: its event line when name is not
// empty, a data line per line of data, and the blank line ending it.
func AppendFrame(dst []byte, name string, data []byte) []byte {
	if name != "" {
		dst = append(dst, "event: "...)
		dst = append(dst, name...)
		dst = append(dst, '\n')
	}
	for {
		i := bytes.IndexByte(data, '\n')
		line := data
		if i >= 0 {
			line = data[:i]
		}
		dst = append(dst, "data: "...)
		dst = append(dst, line...)
		dst = append(dst, '\n')
		if i < 0 {
			break
		}
		data = data[i+1:]
	}
	return append(dst, '\n')
}

// FrameName is the event line of an event of type typ that replaces ev:
// none when ev had none.
func FrameName(ev *Event, typ string) string {
	if len(ev.Name) == 0 {
		return ""
	}
	return typ
}

// Each reads a whole stream held in memory and calls fn with each of its
// events, as a Reader gives them (valid only during the call). The stream
// is already bounded by whoever holds it, so no event is too large.
func Each(stream []byte, fn func(*Event) error) error {
	r := NewReader(len(stream) + 1)
	if err := r.Feed(stream, fn); err != nil {
		return err
	}
	return r.Finish(fn)
}

// TrimBOM is raw without the byte order mark the first event of a stream
// may start with.
func TrimBOM(raw []byte) []byte { return bytes.TrimPrefix(raw, bom) }
