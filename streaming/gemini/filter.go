package gemini

import (
	"bytes"
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/callfilter"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/sse"
)

// The call filter's rules for Gemini. A function call arrives whole in one
// functionCall part, so a chunk is judged part by part: a refused call's
// part is replaced, where it stood, by a text part holding the refusal
// (its thoughtSignature goes with it); nothing in the stream refers to a
// position, so nothing is renumbered, and the finishReason (STOP with a
// call or without) stays as it is.
//
// With Hold, the parts of the calls let through wait for the reply's
// finishReason: a chunk of nothing but such parts is held as it came;
// from any other the held parts are taken out into a chunk of their own
// (the chunk's other members kept), and what remains goes on. Everything
// after a held call waits behind it. At the finishReason the held calls
// go out, in order, just before the chunk that carries it: a Gemini call
// is whole when it arrives, so none is dropped then. An error chunk drops
// what is held.
//
// A functionCall part the decoder does not read as a call (Vertex's
// streamed arguments, partialArgs and willContinue, or a part without a
// name) is withheld like a refused call: no grant can judge it.

type rules struct {
	*callfilter.Filter
	calls map[int]int // calls seen per candidate: the ordinal of CallID
	plan  []action    // one per part of the chunk being filtered, in walk order
	texts []string    // the refusal text of each refused part, in order
}

type action uint8

const (
	actKeep action = iota
	actRefuse
	actHold
)

func newRules(f *callfilter.Filter) *rules {
	return &rules{Filter: f, calls: map[int]int{}}
}

func (r *rules) API() streaming.API { return streaming.APIGemini }

// MarkBodyCut marks nothing: a Gemini call is never cut short.
func (r *rules) MarkBodyCut(string) {}

// AppendEnd appends the error chunk that ends the reply.
func (r *rules) AppendEnd(dst []byte, typ, msg string) []byte { return endChunk(dst, typ, msg) }

// chunkPlan is what judging one chunk found.
type chunkPlan struct {
	refused, held, kept int   // parts of each action (kept: any part not a held call)
	calls               []int // the Held.Calls positions of the calls this chunk holds
	finishing           bool  // a candidate has a finishReason, or the prompt was blocked
	failed              bool  // the chunk is an error
}

// judge walks the chunk js, deciding each part's fate and recording the
// calls it refuses; calls it holds are returned to be added once the
// chunk is kept.
func (r *rules) judge(js string, hold bool) (chunkPlan, []streaming.ToolCall) {
	r.plan, r.texts = r.plan[:0], r.texts[:0]
	var p chunkPlan
	var held []streaming.ToolCall
	o := jsonscan.ReadObject(js, "candidates", "responseId", "error", "promptFeedback")
	p.failed = o[2] != ""
	p.finishing = jsonscan.IsObject(o[3]) && jsonscan.MemberRaw(o[3], "blockReason") != ""
	responseID, _ := jsonscan.StringValue(o[1])
	it := jsonscan.NewArrayIter(o[0])
	for pos := 0; ; pos++ {
		c, ok := it.Next()
		if !ok {
			break
		}
		co := jsonscan.ReadObject(c, "content", "finishReason", "index")
		choice := pos
		if jsonscan.IsNumber(co[2]) {
			if n := jsonscan.Int(co[2]); n >= 0 && n < 1<<16 {
				choice = n
			}
		}
		if fr, ok := jsonscan.StringValue(co[1]); ok && fr != "" {
			p.finishing = true
		}
		parts := jsonscan.NewArrayIter(jsonscan.MemberRaw(co[0], "parts"))
		for part, ok := parts.Next(); ok; part, ok = parts.Next() {
			fcRaw := jsonscan.MemberRaw(part, "functionCall")
			if fcRaw == "" {
				r.plan = append(r.plan, actKeep)
				p.kept++
				continue
			}
			fc := gjson.Parse(fcRaw)
			name := fc.Get("name")
			if !fc.IsObject() || Streamed(fc) || name.Type != gjson.String || name.Str == "" {
				r.refuse(&p, streaming.ToolCall{Choice: choice, Type: CallType, Name: name.Str})
				continue
			}
			n := r.calls[choice]
			r.calls[choice] = n + 1
			tc := streaming.ToolCall{Choice: choice, Index: n, Type: CallType,
				ID: CallID(fc.Get("id"), responseID, choice, n, name.Str), Name: name.Str, Complete: true}
			if !r.PermitsCall(tc.ID, tc.Name) {
				r.refuse(&p, tc)
				continue
			}
			if hold {
				tc.Name = strings.Clone(name.Str) // a copy: the held call outlives the event
				tc.ID = strings.Clone(tc.ID)
				if args := fc.Get("args"); args.IsObject() {
					tc.Arguments = []byte(args.Raw)
				} else {
					tc.Arguments = []byte("{}")
				}
				r.plan = append(r.plan, actHold)
				held = append(held, tc)
				p.held++
				continue
			}
			r.plan = append(r.plan, actKeep)
			p.kept++
		}
	}
	return p, held
}

func (r *rules) refuse(p *chunkPlan, tc streaming.ToolCall) {
	if tc.Arguments == nil {
		tc.Arguments = []byte("{}")
	}
	tc.Name, tc.ID = strings.Clone(tc.Name), strings.Clone(tc.ID)
	r.texts = append(r.texts, r.Refuse(tc))
	r.plan = append(r.plan, actRefuse)
	p.refused++
}

// FilterEvent appends what the client receives for one chunk.
func (r *rules) FilterEvent(dst []byte, ev *sse.Event) []byte {
	h := &r.Held
	data := bytes.TrimSpace(ev.Data)
	if !streaming.ValidJSON(ev) || !jsonscan.IsObject(jsonscan.View(data)) {
		// Not a chunk: no client reads a call from it.
		return r.pass(dst, ev, sse.TrimBOM(ev.Raw))
	}
	js := jsonscan.View(data)
	hold := h.On && !h.Ended
	p, held := r.judge(js, hold)
	if p.finishing || p.failed {
		// A call is whole as it arrives: the finish delivers every held one.
		for i := range r.plan {
			if r.plan[i] == actHold {
				r.plan[i] = actKeep
			}
		}
		if p.held > 0 {
			p.kept += p.held
			p.held = 0
		}
	}
	if p.failed {
		r.DropHeld(func(int, *callfilter.Call) bool { return true })
		dst = r.FlushPassed(dst)
	}
	if p.finishing && !p.failed {
		dst = r.Release(dst, func(int, *callfilter.Call) bool { return true }, nil, nil)
	}
	switch {
	case p.held > 0 && p.kept == 0 && p.refused == 0:
		// Nothing but held calls: kept as it came, under the first.
		first := r.addHeld(held)
		h.Keep(first, ev, -1, 0, false)
		return dst
	case p.held > 0:
		rest := r.write(nil, js, actKeep)
		if p.kept+p.refused > 0 {
			dst = r.pass(dst, ev, sse.AppendFrame(sse.KeepBOM(nil, ev), jsonscan.View(ev.Name), rest))
		}
		first := r.addHeld(held)
		r.Scratch = r.write(r.Scratch[:0], js, actHold)
		h.KeepFramed(first, jsonscan.View(ev.Name), r.Scratch)
		return dst
	case p.refused > 0:
		r.Scratch = r.write(r.Scratch[:0], js, actKeep)
		return r.pass(dst, ev, sse.AppendFrame(sse.KeepBOM(nil, ev), jsonscan.View(ev.Name), r.Scratch))
	}
	return r.pass(dst, ev, ev.Raw)
}

// addHeld starts holding the calls of one chunk and returns the first's
// position.
func (r *rules) addHeld(held []streaming.ToolCall) int {
	first := -1
	for _, tc := range held {
		i := r.Held.AddCall(tc, len(r.Held.Calls))
		if first < 0 {
			first = i
		}
	}
	return first
}

// pass appends b, what the client gets for ev, or keeps it behind a held
// call.
func (r *rules) pass(dst []byte, ev *sse.Event, b []byte) []byte {
	if r.Held.Suffix() {
		r.Held.KeepPassed(sse.TrimBOM(b), -1, ev.Unterminated)
		return dst
	}
	return append(dst, b...)
}

// write appends the chunk js with its parts as planned: with only
// actKeep, the kept parts and the refusals in their places (held parts
// left out); with actHold, only the held parts, and no finishReason.
func (r *rules) write(dst []byte, js string, only action) []byte {
	i, t := 0, 0
	return jsonscan.FilterObject(dst, js, func(dst []byte, m jsonscan.Member) ([]byte, jsonscan.Action) {
		if m.Name() != "candidates" || !jsonscan.IsArray(m.Val) {
			return dst, jsonscan.Keep
		}
		dst, _, _ = jsonscan.FilterArray(dst, m.Val, func(dst []byte, c string) ([]byte, jsonscan.Action) {
			if !jsonscan.IsObject(c) {
				return dst, jsonscan.Keep
			}
			return jsonscan.FilterObject(dst, c, func(dst []byte, m jsonscan.Member) ([]byte, jsonscan.Action) {
				switch m.Name() {
				case "finishReason":
					if only == actHold {
						return dst, jsonscan.Drop
					}
				case "content":
					if !jsonscan.IsObject(m.Val) {
						return dst, jsonscan.Keep
					}
					return jsonscan.FilterObject(dst, m.Val, func(dst []byte, m jsonscan.Member) ([]byte, jsonscan.Action) {
						if m.Name() != "parts" || !jsonscan.IsArray(m.Val) {
							return dst, jsonscan.Keep
						}
						dst, _, _ = jsonscan.FilterArray(dst, m.Val, func(dst []byte, part string) ([]byte, jsonscan.Action) {
							a := actKeep
							if i < len(r.plan) {
								a = r.plan[i]
							}
							i++
							switch {
							case a == actRefuse && only == actKeep:
								dst = jsonscan.AppendQuoted(append(dst, `{"text":`...), r.texts[t])
								t++
								return append(dst, '}'), jsonscan.Replace
							case a == actRefuse:
								t++
								return dst, jsonscan.Drop
							case a == only:
								return dst, jsonscan.Keep
							}
							return dst, jsonscan.Drop
						})
						return dst, jsonscan.Replace
					}, nil), jsonscan.Replace
				}
				return dst, jsonscan.Keep
			}, nil), jsonscan.Replace
		})
		return dst, jsonscan.Replace
	}, nil)
}

// FilterBody rewrites a whole reply's refused calls; nil when nothing
// changes.
func (r *rules) FilterBody(js string) []byte {
	p, _ := r.judge(js, false)
	if p.refused == 0 {
		return nil
	}
	return r.write(nil, js, actKeep)
}
