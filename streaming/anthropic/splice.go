package anthropic

import (
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/callfilter"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/reshape"
	"gatekeeper/streaming/sse"
)

// stopAt is the position of the message_delta carrying the stop.
func stopAt(evs []reshape.Event) int {
	for i := range evs {
		if js, ok, _ := evs[i].JSON(streaming.APIAnthropic); ok && gjson.Get(js, "type").Str == "message_delta" &&
			gjson.Get(js, "delta.stop_reason").Type == gjson.String {
			return i
		}
	}
	return -1
}

// keptBlocks counts the blocks of a Message the client gets with its
// client calls left out.
func (m *message) keptBlocks() int {
	n := 0
	for _, b := range m.blocks {
		if gjson.Get(b.start, "type").Str != "tool_use" {
			n++
		}
	}
	return n
}

func spliceStream(first []byte, fe, ce []reshape.Event) ([]byte, error) {
	fm, err := readMessage(fe)
	if err != nil {
		return nil, err
	}
	cm, err := readMessage(ce)
	if err != nil {
		return nil, err
	}
	out, _ := callfilter.HeldPrefix(first, stopAt(fe), newRules)
	shift := fm.keptBlocks()
	usage := reshape.SumUsage(fm.usageJSON(), cm.usageJSON())
	for i := range ce {
		e := &ce[i]
		js, ok, _ := e.JSON(streaming.APIAnthropic)
		if !ok {
			out = reshape.AppendCont(out, e)
			continue
		}
		switch gjson.Get(js, "type").Str {
		case "message_start":
		case "content_block_start", "content_block_delta", "content_block_stop":
			idx := gjson.Get(js, "index")
			if idx.Type != gjson.Number {
				out = reshape.AppendCont(out, e)
				continue
			}
			out = sse.AppendFrame(out, e.Name, callfilter.Renumber(nil, js, "index", int(idx.Int())+shift, 0, false))
		case "message_delta":
			out = sse.AppendFrame(out, e.Name, jsonscan.SetMembers(nil, js, jsonscan.Set{Key: "usage", Val: usage}))
		default:
			out = reshape.AppendCont(out, e)
		}
	}
	return out, nil
}

// splicedMessage is first's Message with its content less its client
// calls, then cont's, with cont's stop and the usage summed
// (streaming.Dialect.SpliceJSON).
func splicedMessage(fs, cs string) []byte {
	var blocks []string
	for _, b := range gjson.Get(fs, "content").Array() {
		if b.Get("type").Str != "tool_use" {
			blocks = append(blocks, b.Raw)
		}
	}
	for _, b := range gjson.Get(cs, "content").Array() {
		blocks = append(blocks, b.Raw)
	}
	set := []jsonscan.Set{{Key: "content", Val: "[" + strings.Join(blocks, ",") + "]"}}
	for _, k := range []string{"stop_reason", "stop_sequence", "stop_details"} {
		set = append(set, jsonscan.Set{Key: k, Val: gjson.Get(cs, k).Raw})
	}
	set = append(set, jsonscan.Set{Key: "usage", Val: reshape.SumUsage(gjson.Get(fs, "usage").Raw, gjson.Get(cs, "usage").Raw)})
	return jsonscan.SetMembers(nil, fs, set...)
}
