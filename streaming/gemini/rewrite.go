package gemini

import (
	"slices"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/request"
)

// AppendNotice returns body with a user content holding text added as the
// last item of "contents": {"role":"user","parts":[{"text":"..."}]}.
// Every other byte of body is unchanged.
func (Dialect) AppendNotice(body []byte, text string) ([]byte, error) {
	return appendContents(body, appendUserText(nil, text))
}

func appendUserText(dst []byte, text string) []byte {
	dst = append(dst, `{"role":"user","parts":[{"text":`...)
	dst = jsonscan.AppendQuoted(dst, text)
	return append(dst, "}]}"...)
}

// appendContents adds items at the end of "contents".
func appendContents(body, items []byte) ([]byte, error) {
	return request.AppendConversation(body, "contents", items, nil)
}

// RestrictTools removes from the request every tool whose name keep
// rejects: a function declaration goes from its functionDeclarations
// list, and the tools entry with it when none is left; any other entry
// (googleSearch, codeExecution...) goes when its name is refused. A
// toolConfig's allowedFunctionNames loses the names removed. When no
// tool is left, "tools" goes, and "toolConfig" with it. Every kept byte
// stays as it came.
func (Dialect) RestrictTools(body []byte, keep func(name string) bool) ([]byte, []string, error) {
	s := jsonscan.View(body)
	if err := request.CheckObject(s, 0); err != nil {
		return nil, nil, err
	}
	open := jsonscan.SkipSpace(s, 0)
	top, closing := jsonscan.ObjectMembers(nil, s, open)
	toolsAt := -1 // the last "tools": the one the provider reads
	for i, m := range top {
		if jsonscan.KeyEqual(m.Key, "tools") {
			toolsAt = i
		}
	}
	if toolsAt < 0 || !jsonscan.IsArrayAt(s, top[toolsAt].Val) {
		return body, nil, nil
	}
	edits, removed, kept := restrictList(s, top[toolsAt].Val, keep, nil)
	if len(removed) == 0 {
		return body, nil, nil
	}
	gone := kept == 0
	drop := make([]bool, len(top))
	for i, m := range top {
		config := jsonscan.KeyEqual(m.Key, "toolConfig") || jsonscan.KeyEqual(m.Key, "tool_config")
		switch {
		case i == toolsAt:
			drop[i] = gone
		case config && gone:
			drop[i] = true
		case config && jsonscan.IsObjectAt(s, m.Val):
			edits = append(edits, allowedNames(s, m.Val, removed)...)
		}
	}
	if gone {
		edits = slices.DeleteFunc(edits, func(e jsonscan.Edit) bool {
			return e.Start >= top[toolsAt].Val.Start && e.End <= top[toolsAt].Val.End
		})
	}
	edits = jsonscan.RemoveItems(edits, jsonscan.MemberSpans(top), drop, open+1, closing)
	slices.SortFunc(edits, func(a, b jsonscan.Edit) int { return a.Start - b.Start })
	return jsonscan.ApplyEdits(body, edits), removed, nil
}

// restrictList plans the removals inside one tools array and reports the
// names removed and how many entries are kept.
func restrictList(s string, list jsonscan.Span, keep func(string) bool, removed []string) ([]jsonscan.Edit, []string, int) {
	var edits []jsonscan.Edit
	entries, closing := jsonscan.ArrayItems(nil, s, list.Start)
	drop := make([]bool, len(entries))
	kept := 0
	for i, e := range entries {
		entry := s[e.Start:e.End]
		decls, ok := declarationsSpan(s, e)
		if !ok {
			for m, next, more := jsonscan.NextMember(entry, jsonscan.ObjectStart(entry)); more; m, next, more = jsonscan.NextMember(entry, next) {
				if name := m.Name(); name != "" && !keep(name) {
					drop[i] = true
					removed = append(removed, name)
				}
			}
			if !drop[i] {
				kept++
			}
			continue
		}
		items, end := jsonscan.ArrayItems(nil, s, decls.Start)
		gone := make([]bool, len(items))
		left := 0
		for j, d := range items {
			name := request.FirstName(jsonscan.MemberRaw(s[d.Start:d.End], "name"))
			if name != "" && !keep(name) {
				gone[j] = true
				removed = append(removed, name)
				continue
			}
			left++
		}
		switch {
		case left == 0 && len(items) > 0:
			drop[i] = true
		case left < len(items):
			edits = jsonscan.RemoveItems(edits, items, gone, decls.Start+1, end)
			kept++
		default:
			kept++
		}
	}
	edits = jsonscan.RemoveItems(edits, entries, drop, list.Start+1, closing)
	return edits, removed, kept
}

// declarationsSpan is the functionDeclarations array of a tools entry.
func declarationsSpan(s string, e jsonscan.Span) (jsonscan.Span, bool) {
	if !jsonscan.IsObjectAt(s, e) {
		return jsonscan.Span{}, false
	}
	for _, key := range [...]string{"functionDeclarations", "function_declarations"} {
		if v, ok := jsonscan.FindMember(s, e.Start, key); ok && jsonscan.IsArrayAt(s, v) {
			return v, true
		}
	}
	return jsonscan.Span{}, false
}

// allowedNames plans the removal of removed names from a toolConfig's
// functionCallingConfig.allowedFunctionNames.
func allowedNames(s string, config jsonscan.Span, removed []string) []jsonscan.Edit {
	for _, k := range [...]string{"functionCallingConfig", "function_calling_config"} {
		fcc, ok := jsonscan.FindMember(s, config.Start, k)
		if !ok || !jsonscan.IsObjectAt(s, fcc) {
			continue
		}
		for _, a := range [...]string{"allowedFunctionNames", "allowed_function_names"} {
			arr, ok := jsonscan.FindMember(s, fcc.Start, a)
			if !ok || !jsonscan.IsArrayAt(s, arr) {
				continue
			}
			items, end := jsonscan.ArrayItems(nil, s, arr.Start)
			drop := make([]bool, len(items))
			any := false
			for i, it := range items {
				name, _ := jsonscan.StringValue(s[it.Start:it.End])
				drop[i] = slices.Contains(removed, name)
				any = any || drop[i]
			}
			if any {
				return jsonscan.RemoveItems(nil, items, drop, arr.Start+1, end)
			}
		}
	}
	return nil
}

// Continuation is the request that continues reply, a reply whose client
// calls were not run, with results as their answers
// (request.Continuation does what every API shares): the reply's first
// candidate's content as a model content, then one user content with a
// functionResponse per call, {"name","response":{"error":answer}} (its
// "id" when the call carried one).
func (d Dialect) Continuation(req, reply []byte, streamed bool, results map[string][]byte) ([]byte, error) {
	return request.Continuation(d, req, reply, streamed, results, continuation, appendContents)
}

func continuation(reply gjson.Result, calls []streaming.ToolCall, answers []string) []string {
	content := reply.Get("candidates.0.content")
	parts := content.Get("parts")
	b := []byte(`{"role":"model","parts":`)
	if parts.IsArray() {
		b = append(b, parts.Raw...)
	} else {
		b = append(b, "[]"...)
	}
	items := []string{string(append(b, '}'))}
	own := map[string]bool{}
	parts.ForEach(func(_, p gjson.Result) bool {
		if id := p.Get("functionCall.id"); id.Type == gjson.String && id.Str != "" {
			own[id.Str] = true
		}
		return true
	})
	r := []byte(`{"role":"user","parts":[`)
	n := 0
	for i, tc := range calls {
		if tc.Choice != 0 {
			continue // only the first candidate is continued
		}
		if n > 0 {
			r = append(r, ',')
		}
		n++
		r = jsonscan.AppendQuoted(append(r, `{"functionResponse":{"name":`...), tc.Name)
		if own[tc.ID] {
			r = jsonscan.AppendQuoted(append(r, `,"id":`...), tc.ID)
		}
		r = jsonscan.AppendQuoted(append(r, `,"response":{"error":`...), answers[i])
		r = append(r, "}}}"...)
	}
	if n > 0 {
		items = append(items, string(append(r, "]}"...)))
	}
	return items
}
