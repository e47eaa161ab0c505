package gemini

import (
	"fmt"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/callfilter"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/reshape"
	"gatekeeper/streaming/sse"
)

// Reshaping held Gemini replies. A stream's chunks are each a
// GenerateContentResponse; the body a whole stream carries is the one
// generateContent gives: each candidate's parts in order (consecutive
// plain text parts joined, as the API joins them), its last finishReason
// and other members, and the top-level members of the last chunk that
// has them (usageMetadata, modelVersion, responseId...). Bodies are
// written compact, on one line: the Gemini SDKs read a stream's data
// only one line at a time.

type candidate struct {
	index   int
	parts   []string // raw parts
	members map[string]string
	order   []string
	role    string
}

// isStop reports whether the chunk js ends the reply: a candidate's
// finishReason, or a prompt blocked.
func isStop(js string) bool {
	r := gjson.Parse(js)
	if br := r.Get("promptFeedback.blockReason"); br.Exists() {
		return true
	}
	stop := false
	r.Get("candidates").ForEach(func(_, c gjson.Result) bool {
		if fr := c.Get("finishReason"); fr.Type == gjson.String && fr.Str != "" {
			stop = true
		}
		return !stop
	})
	return stop
}

// chunks reads the events of a whole stream: its chunks, the position of
// its stop among the events (-1 when none), or an error when a chunk is
// not JSON or is an error.
func chunks(evs []reshape.Event) (js []string, at []int, stop int, err error) {
	stop = -1
	for i := range evs {
		s, ok, err := evs[i].JSON(streaming.APIGemini)
		if err != nil {
			return nil, nil, -1, err
		}
		if !ok {
			continue
		}
		if gjson.Get(s, "error").Exists() {
			return nil, nil, -1, fmt.Errorf("%w: the stream ends on an error", streaming.ErrIncompleteStream)
		}
		js, at = append(js, s), append(at, i)
		if stop < 0 && isStop(s) {
			stop = i
		}
	}
	if stop < 0 {
		return nil, nil, -1, streaming.ErrIncompleteStream
	}
	return js, at, stop, nil
}

// assemble is AssembleJSON over a stream's events.
func assemble(evs []reshape.Event) ([]byte, error) {
	js, _, _, err := chunks(evs)
	if err != nil {
		return nil, err
	}
	return merge(js), nil
}

// merge joins chunks into one reply body.
func merge(js []string) []byte {
	var cands []*candidate
	top := map[string]string{}
	var order []string
	for _, s := range js {
		gjson.Parse(s).ForEach(func(k, v gjson.Result) bool {
			if k.Str == "candidates" {
				pos := 0
				v.ForEach(func(_, c gjson.Result) bool {
					if c.IsObject() {
						cands = addCandidate(cands, c, candidateIndex(c, pos))
					}
					pos++
					return true
				})
			}
			if _, ok := top[k.Str]; !ok {
				order = append(order, k.Str)
			}
			top[k.Str] = v.Raw
			return true
		})
	}
	b := []byte{'{'}
	for i, k := range order {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(jsonscan.AppendQuoted(b, k), ':')
		if k != "candidates" {
			b = append(b, compact(top[k])...)
			continue
		}
		b = append(b, '[')
		for j, c := range cands {
			if j > 0 {
				b = append(b, ',')
			}
			b = c.append(b)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

func compact(raw string) string { return gjson.Get(raw, "@ugly").Raw }

func addCandidate(cands []*candidate, c gjson.Result, index int) []*candidate {
	var cd *candidate
	for _, x := range cands {
		if x.index == index {
			cd = x
		}
	}
	if cd == nil {
		cd = &candidate{index: index, members: map[string]string{}, role: `"model"`}
		cands = append(cands, cd)
	}
	c.ForEach(func(k, v gjson.Result) bool {
		if k.Str == "content" {
			if r := v.Get("role"); r.Type == gjson.String {
				cd.role = r.Raw
			}
			v.Get("parts").ForEach(func(_, p gjson.Result) bool {
				cd.addPart(p)
				return true
			})
		}
		if _, ok := cd.members[k.Str]; !ok {
			cd.order = append(cd.order, k.Str)
		}
		cd.members[k.Str] = v.Raw
		return true
	})
	return cands
}

// plainText reports whether a part is only text (a thought or not).
func plainText(p gjson.Result) (text string, thought, ok bool) {
	ok = p.IsObject()
	p.ForEach(func(k, v gjson.Result) bool {
		switch {
		case k.Str == "text" && v.Type == gjson.String:
			text = v.Str
		case k.Str == "thought" && (v.Type == gjson.True || v.Type == gjson.False):
			thought = v.Type == gjson.True
		default:
			ok = false
		}
		return ok
	})
	return text, thought, ok && p.Get("text").Exists()
}

func (c *candidate) addPart(p gjson.Result) {
	if t, th, ok := plainText(p); ok && len(c.parts) > 0 {
		if pt, pth, pok := plainText(gjson.Parse(c.parts[len(c.parts)-1])); pok && pth == th {
			c.parts[len(c.parts)-1] = textPart(pt+t, th)
			return
		}
	}
	if t, th, ok := plainText(p); ok && t == "" {
		c.parts = append(c.parts, textPart("", th))
		return
	}
	c.parts = append(c.parts, compact(p.Raw))
}

func textPart(text string, thought bool) string {
	b := jsonscan.AppendQuoted([]byte(`{"text":`), text)
	if thought {
		b = append(b, `,"thought":true`...)
	}
	return string(append(b, '}'))
}

func (c *candidate) append(b []byte) []byte {
	parts := c.parts
	// An empty text part (the API's finish chunk has one) says nothing
	// once other parts are there.
	var kept []string
	for _, p := range parts {
		if t, _, ok := plainText(gjson.Parse(p)); ok && t == "" && len(parts) > 1 {
			continue
		}
		kept = append(kept, p)
	}
	b = append(b, '{')
	content := false
	for i, k := range c.order {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(jsonscan.AppendQuoted(b, k), ':')
		if k == "content" {
			content = true
			b = appendContent(b, kept, c.role)
			continue
		}
		b = append(b, compact(c.members[k])...)
	}
	if !content {
		if len(c.order) > 0 {
			b = append(b, ',')
		}
		b = appendContent(append(b, `"content":`...), kept, c.role)
	}
	return append(b, '}')
}

func appendContent(b []byte, parts []string, role string) []byte {
	b = append(b, `{"parts":[`...)
	for i, p := range parts {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, p...)
	}
	return append(append(append(b, `],"role":`...), role...), '}')
}

// RenderSSE turns a whole generateContent body into the stream that
// carries it: one chunk, the body itself on one line.
func (d Dialect) RenderSSE(body []byte) ([]byte, error) {
	return reshape.Render(d, body, "a GenerateContentResponse",
		func(r gjson.Result) bool { return r.Get("candidates").IsArray() || r.Get("promptFeedback").IsObject() },
		func(s string, _ gjson.Result) []byte { return sse.AppendFrame(nil, "", []byte(compact(s))) })
}

// spliceStream joins first and its continuation into one stream: what a
// filter with Hold gives of first before its stop (calls dropped), the
// stop chunk's other parts, then cont's chunks with usage summed with
// first's. cont's chunks keep their own responseId: the ids of calls
// that name none derive from it (CallID), and a continuation's call must
// not take the id of the refused call it follows.
func spliceStream(first []byte, fevs, cevs []reshape.Event) ([]byte, error) {
	fjs, fat, stop, err := chunks(fevs)
	if err != nil {
		return nil, err
	}
	cjs, _, _, err := chunks(cevs)
	if err != nil {
		return nil, err
	}
	out, _ := callfilter.HeldPrefix(first, stop, newRules)
	var stopJS string
	for i, at := range fat {
		if at == stop {
			stopJS = fjs[i]
		}
	}
	last := gjson.Parse(fjs[len(fjs)-1])
	usage := last.Get("usageMetadata").Raw
	if rest, ok := withoutCalls(stopJS); ok {
		out = sse.AppendFrame(out, "", rest)
	}
	for _, s := range cjs {
		b := jsonscan.FilterObject(nil, s, func(dst []byte, m jsonscan.Member) ([]byte, jsonscan.Action) {
			if m.Name() == "usageMetadata" {
				return append(dst, compact(reshape.SumUsage(usage, m.Val))...), jsonscan.Replace
			}
			return append(dst, compact(m.Val)...), jsonscan.Replace
		}, nil)
		out = sse.AppendFrame(out, "", b)
	}
	return out, nil
}

// withoutCalls is the stop chunk js without its function calls, its
// finishReason and its usage: the part of it that comes before the
// continuation. ok is false when nothing but empty text is left.
func withoutCalls(js string) ([]byte, bool) {
	said := false
	b := jsonscan.FilterObject(nil, js, func(dst []byte, m jsonscan.Member) ([]byte, jsonscan.Action) {
		switch m.Name() {
		case "usageMetadata":
			return dst, jsonscan.Drop
		case "candidates":
			if !jsonscan.IsArray(m.Val) {
				return dst, jsonscan.Keep
			}
			dst, _, _ = jsonscan.FilterArray(dst, m.Val, func(dst []byte, c string) ([]byte, jsonscan.Action) {
				if !jsonscan.IsObject(c) {
					return dst, jsonscan.Keep
				}
				return jsonscan.FilterObject(dst, c, func(dst []byte, m jsonscan.Member) ([]byte, jsonscan.Action) {
					switch m.Name() {
					case "finishReason":
						return dst, jsonscan.Drop
					case "content":
						parts := gjson.Get(m.Val, "parts")
						var kept []string
						parts.ForEach(func(_, p gjson.Result) bool {
							if p.Get("functionCall").Exists() {
								return true
							}
							if t, _, ok := plainText(p); ok && t == "" {
								return true
							}
							said = true
							kept = append(kept, compact(p.Raw))
							return true
						})
						role := gjson.Get(m.Val, "role").Raw
						if role == "" {
							role = `"model"`
						}
						return appendContent(dst, kept, role), jsonscan.Replace
					}
					return dst, jsonscan.Keep
				}, nil), jsonscan.Replace
			})
			return dst, jsonscan.Replace
		}
		return dst, jsonscan.Keep
	}, nil)
	return []byte(compact(string(b))), said
}

// spliceJSON joins a held body and its continuation's: first's body, its
// first candidate's parts without calls followed by cont's, cont's
// finishReason, usage summed, and cont's responseId, from which the ids of
// its calls derive (CallID).
func spliceJSON(first, cont string) []byte {
	cc := gjson.Get(cont, "candidates.0")
	return jsonscan.FilterObject(nil, first, func(dst []byte, m jsonscan.Member) ([]byte, jsonscan.Action) {
		switch m.Name() {
		case "usageMetadata":
			return append(dst, compact(reshape.SumUsage(m.Val, gjson.Get(cont, "usageMetadata").Raw))...), jsonscan.Replace
		case "responseId":
			if id := gjson.Get(cont, "responseId"); id.Exists() {
				return append(dst, id.Raw...), jsonscan.Replace
			}
		case "candidates":
			if !jsonscan.IsArray(m.Val) {
				return dst, jsonscan.Keep
			}
			pos := 0
			dst, _, _ = jsonscan.FilterArray(dst, m.Val, func(dst []byte, c string) ([]byte, jsonscan.Action) {
				defer func() { pos++ }()
				if !jsonscan.IsObject(c) {
					return dst, jsonscan.Keep
				}
				continued := candidateIndex(gjson.Parse(c), pos) == 0
				return jsonscan.FilterObject(dst, c, func(dst []byte, m jsonscan.Member) ([]byte, jsonscan.Action) {
					switch m.Name() {
					case "finishReason":
						if continued && cc.Get("finishReason").Exists() {
							return append(dst, cc.Get("finishReason").Raw...), jsonscan.Replace
						}
					case "content":
						var parts []string
						gjson.Get(m.Val, "parts").ForEach(func(_, p gjson.Result) bool {
							if !p.Get("functionCall").Exists() {
								parts = append(parts, compact(p.Raw))
							}
							return true
						})
						if continued {
							cc.Get("content.parts").ForEach(func(_, p gjson.Result) bool {
								parts = append(parts, compact(p.Raw))
								return true
							})
						}
						role := gjson.Get(m.Val, "role").Raw
						if role == "" {
							role = `"model"`
						}
						return appendContent(dst, parts, role), jsonscan.Replace
					}
					return dst, jsonscan.Keep
				}, nil), jsonscan.Replace
			})
			return dst, jsonscan.Replace
		}
		return dst, jsonscan.Keep
	}, nil)
}
