package streaming

import (
	"bytes"
	"fmt"

	"gatekeeper/streaming/sse"

	"gatekeeper/streaming/internal/jsonscan"
)

// Chat Completions streams report usage only when the request asks for it
// (stream_options.include_usage). gatekeeper meters every call, so it asks
// on the client's behalf, and takes out of the stream what the client did
// not ask for: its SDK may not expect the last chunk with empty choices.

// EnsureIncludeUsage makes a streamed Chat Completions request (stream
// true) report its usage: when stream_options.include_usage is not true,
// it returns body with it set to true, and added=true. It adds
// stream_options at the end of the body when absent, turns a null
// stream_options into the object, adds the member at the end of an
// existing stream_options object, or replaces a value that is not true
// (false, null) where it stands; every other byte stays as it was. Anything
// else (not streamed, already true, stream_options neither an object nor
// null) returns body unchanged (the same slice) and false. A body that is
// not a JSON object fails with ErrInvalidJSON.
func EnsureIncludeUsage(body []byte) (out []byte, added bool, err error) {
	s := jsonscan.View(body)
	if err := checkObject(s, 0); err != nil {
		return nil, false, err
	}
	var buf [32]jsonscan.SpanMember
	top, _ := jsonscan.ObjectMembers(buf[:0], s, jsonscan.SkipSpace(s, 0))
	var stream, opts jsonscan.Span
	hasOpts := false
	for _, m := range top { // the last of duplicate members counts, as with the provider
		switch {
		case jsonscan.KeyEqual(m.Key, "stream"):
			stream = m.Val
		case jsonscan.KeyEqual(m.Key, "stream_options"):
			opts, hasOpts = m.Val, true
		}
	}
	if s[stream.Start:stream.End] != "true" {
		return body, false, nil
	}
	var edits []jsonscan.Edit
	switch {
	case !hasOpts:
		end := top[len(top)-1].Val.End
		edits = append(edits, jsonscan.Edit{Start: end, End: end, Text: `,"stream_options":{"include_usage":true}`})
	case s[opts.Start:opts.End] == "null":
		edits = append(edits, jsonscan.Edit{Start: opts.Start, End: opts.End, Text: `{"include_usage":true}`})
	case jsonscan.IsObjectAt(s, opts):
		inner, _ := jsonscan.ObjectMembers(nil, s, opts.Start)
		found := false
		for _, m := range inner {
			if !jsonscan.KeyEqual(m.Key, "include_usage") {
				continue
			}
			// Every occurrence is made true, so that decoders keeping the
			// first and those keeping the last agree.
			found = true
			if s[m.Val.Start:m.Val.End] != "true" {
				edits = append(edits, jsonscan.Edit{Start: m.Val.Start, End: m.Val.End, Text: "true"})
			}
		}
		switch {
		case found:
		case len(inner) == 0:
			edits = append(edits, jsonscan.Edit{Start: opts.Start + 1, End: opts.Start + 1, Text: `"include_usage":true`})
		default:
			end := inner[len(inner)-1].Val.End
			edits = append(edits, jsonscan.Edit{Start: end, End: end, Text: `,"include_usage":true`})
		}
	}
	if len(edits) == 0 {
		return body, false, nil
	}
	return jsonscan.ApplyEdits(body, edits), true, nil
}

// StripUsage undoes EnsureIncludeUsage on one Chat Completions stream event,
// given whole as the Reader hands it (Event.Raw: "data: {...}\n\n",
// possibly with other fields, comments, CRLF line endings or a leading
// byte order mark).
//
// The usage-only chunk (usage not null, choices an empty array or absent,
// and no error member, which must reach the client) is dropped:
// drop=true, out nil. Any other chunk loses its top-level "usage" members:
// OpenAI sends "usage":null on every chunk once include_usage is on, and
// DeepSeek-style providers put usage on the finish chunk. Every other byte
// stays, and so does the framing (field order, line endings, the
// terminating blank line). "[DONE]", comments, events whose data is not a
// valid JSON object and events without a top-level usage member are
// returned unchanged: the same slice, with no allocation.
//
// An event whose data spans several data lines (no provider sends one) is
// rebuilt with its data lines, each written "data: ", in place of the
// first of them.
func StripUsage(raw []byte) (out []byte, drop bool) {
	from := len(raw) - len(sse.TrimBOM(raw))
	var data jsonscan.Span // the value of the first data line
	lines := 0
	for i := from; i < len(raw); {
		end, next := sseLineEnd(raw, i)
		if end == i {
			break // the blank line that ends the event
		}
		if vs, ok := dataField(raw[i:end]); ok {
			lines++
			if lines == 1 {
				data = jsonscan.Span{Start: i + vs, End: end}
			}
		}
		i = next
	}
	switch lines {
	case 0:
		return raw, false
	case 1:
		var buf [1]jsonscan.Edit
		edits, usageOnly := usageEdits(buf[:0], jsonscan.View(raw[data.Start:data.End]))
		switch {
		case usageOnly:
			return nil, true
		case len(edits) == 0:
			return raw, false
		}
		for i := range edits {
			edits[i].Start += data.Start
			edits[i].End += data.Start
		}
		return jsonscan.ApplyEdits(raw, edits), false
	}
	joined := joinedData(raw, from)
	edits, usageOnly := usageEdits(nil, jsonscan.View(joined))
	switch {
	case usageOnly:
		return nil, true
	case len(edits) == 0:
		return raw, false
	}
	return withData(raw, from, jsonscan.ApplyEdits(joined, edits)), false
}

// usageEdits reads the data of one chunk: it appends to dst the edits
// that remove its top-level usage members, or reports usageOnly for the
// chunk that carries nothing but usage. Data that is not a valid JSON
// object gets neither: the decoder counts it as unparsed, and the client
// must see it as it came.
func usageEdits(dst []jsonscan.Edit, d string) (edits []jsonscan.Edit, usageOnly bool) {
	open := jsonscan.SkipSpace(d, 0)
	if open == len(d) || d[open] != '{' {
		return dst, false
	}
	// One walk that allocates nothing finds the members that matter and,
	// for the usual single usage member, the bytes that go with it: the
	// separator before it, else the one after it.
	var usage, choices jsonscan.Span
	var usages int
	hasChoices, hasError := false, false
	cut := jsonscan.Span{Start: -1, End: -1}
	prevEnd, closing := -1, len(d)
	for i, n := open+1, 0; n < len(d); n++ {
		m, next, ok := jsonscan.NextMember(d, i)
		if !ok {
			closing = next
			break
		}
		keyStart := jsonscan.SkipSpace(d, i)
		if keyStart < len(d) && d[keyStart] == ',' {
			keyStart = jsonscan.SkipSpace(d, keyStart+1)
		}
		if usages == 1 && cut.End < 0 {
			cut.End = keyStart // the member after the first usage starts here
		}
		switch {
		case jsonscan.KeyEqual(m.Key, "usage"):
			usages++
			usage = jsonscan.Span{Start: m.Off, End: next}
			if usages == 1 {
				cut.Start = keyStart
				if prevEnd >= 0 {
					cut = jsonscan.Span{Start: prevEnd, End: next}
				}
			}
		case jsonscan.KeyEqual(m.Key, "choices"):
			choices, hasChoices = jsonscan.Span{Start: m.Off, End: next}, true
		case jsonscan.KeyEqual(m.Key, "error"):
			hasError = true
		}
		prevEnd = next
		i = next
	}
	if usages == 0 || checkObject(d, 0) != nil {
		return dst, false
	}
	if d[usage.Start:usage.End] != "null" && !hasError &&
		(!hasChoices || jsonscan.IsArrayAt(d, choices) && jsonscan.SkipSpace(d, choices.Start+1) == choices.End-1) {
		return dst, true
	}
	if usages == 1 {
		if cut.End < 0 { // the only member
			cut = jsonscan.Span{Start: open + 1, End: closing}
		}
		return append(dst, jsonscan.Edit{Start: cut.Start, End: cut.End}), false
	}
	members, closing := jsonscan.ObjectMembers(nil, d, open)
	drop := make([]bool, len(members))
	for i, m := range members {
		drop[i] = jsonscan.KeyEqual(m.Key, "usage")
	}
	return jsonscan.RemoveItems(dst, jsonscan.MemberSpans(members), drop, open+1, closing), false
}

// sseLineEnd returns, for the line of raw that starts at i, the offset of
// its line ending (LF, CRLF or a lone CR) and that of the next line.
func sseLineEnd(raw []byte, i int) (end, next int) {
	j := bytes.IndexAny(raw[i:], "\r\n")
	if j < 0 {
		return len(raw), len(raw)
	}
	end = i + j
	next = end + 1
	if raw[end] == '\r' && next < len(raw) && raw[next] == '\n' {
		next++
	}
	return end, next
}

// dataField reports whether line is a data field, and where its value
// starts (past the colon and one space).
func dataField(line []byte) (valueStart int, ok bool) {
	colon := bytes.IndexByte(line, ':')
	if colon < 0 {
		return len(line), string(line) == "data"
	}
	if string(line[:colon]) != "data" {
		return 0, false
	}
	vs := colon + 1
	if vs < len(line) && line[vs] == ' ' {
		vs++
	}
	return vs, true
}

// joinedData is the event's data as the Reader gives it: the values of its
// data lines joined with "\n".
func joinedData(raw []byte, from int) []byte {
	var out []byte
	first := true
	for i := from; i < len(raw); {
		end, next := sseLineEnd(raw, i)
		if end == i {
			break
		}
		if vs, ok := dataField(raw[i:end]); ok {
			if !first {
				out = append(out, '\n')
			}
			out = append(out, raw[i+vs:end]...)
			first = false
		}
		i = next
	}
	return out
}

// withData rebuilds an event of several data lines with data instead: its
// lines, each written "data: " and ended like the first data line, take the
// place of the first data line, and the other data lines go. Every other
// line stays as it was.
func withData(raw []byte, from int, data []byte) []byte {
	out := make([]byte, 0, len(raw)+len(data))
	out = append(out, raw[:from]...)
	written := false
	i := from
	for i < len(raw) {
		end, next := sseLineEnd(raw, i)
		if end == i {
			break
		}
		if _, ok := dataField(raw[i:end]); !ok {
			out = append(out, raw[i:next]...)
		} else if !written {
			eol := raw[end:next]
			if len(eol) == 0 {
				eol = []byte("\n")
			}
			for part := range bytes.SplitSeq(data, []byte("\n")) {
				out = append(out, "data: "...)
				out = append(out, part...)
				out = append(out, eol...)
			}
			written = true
		}
		i = next
	}
	return append(out, raw[i:]...)
}

// checkObject reports whether s is one valid JSON object, nested no deeper
// than jsonscan.MaxNesting.
func checkObject(s string, depth int) error {
	if p := jsonscan.ObjectProblem(s, depth); p != "" {
		return fmt.Errorf("%w: request body %s", ErrInvalidJSON, p)
	}
	return nil
}
