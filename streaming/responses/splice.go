package responses

import (
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/callfilter"
	"gatekeeper/streaming/internal/callitems"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/reshape"
	"gatekeeper/streaming/sse"
)

// keptOutput is the raw items of a Response's output the client gets with
// its client calls left out.
func keptOutput(resp string) []string {
	var kept []string
	for _, it := range gjson.Get(resp, "output").Array() {
		if ci, call := callitems.Of(it); !call || ci.Hosted {
			kept = append(kept, it.Raw)
		}
	}
	return kept
}

// splicedResponse is first's Response with cont's output after
// first's kept items, usage summed, and cont's status and details.
func splicedResponse(fr, cr string) []byte {
	items := keptOutput(fr)
	for _, it := range gjson.Get(cr, "output").Array() {
		items = append(items, it.Raw)
	}
	set := jsonscan.Members([]jsonscan.Set{{Key: "output", Val: "[" + strings.Join(items, ",") + "]"}}, cr,
		"status", "incomplete_details", "error", "completed_at")
	fu, cu := gjson.Get(fr, "usage").Raw, gjson.Get(cr, "usage").Raw
	if u := reshape.SumUsage(fu, cu); jsonscan.IsObject(u) {
		set = append(set, jsonscan.Set{Key: "usage", Val: u})
	}
	return jsonscan.SetMembers(nil, fr, set...)
}

func spliceStream(first []byte, fe, ce []reshape.Event) ([]byte, error) {
	fr, stop, err := terminal(fe)
	if err != nil {
		return nil, err
	}
	cr, _, err := terminal(ce)
	if err != nil {
		return nil, err
	}
	out, f := callfilter.HeldPrefix(first, stop, newRules)
	shift := len(keptOutput(fr))
	seq, _ := f.seq.Next(0, false)
	for i := range ce {
		e := &ce[i]
		js, ok, _ := e.JSON(streaming.APIResponses)
		if !ok {
			out = reshape.AppendCont(out, e)
			continue
		}
		typ := gjson.Get(js, "type").Str
		switch typ {
		case "response.created", "response.in_progress", "response.queued":
			continue
		}
		_, numbered := callfilter.ParseSeq(gjson.Get(js, "sequence_number").Raw)
		pos := -1
		if oi := gjson.Get(js, "output_index"); oi.Type == gjson.Number {
			pos = int(oi.Int()) + shift
		}
		data := callfilter.Renumber(nil, js, "output_index", pos, seq, numbered)
		if numbered {
			seq++
		}
		switch typ {
		case "response.completed", "response.incomplete", "response.failed":
			data = jsonscan.SetMembers(nil, string(data), jsonscan.Set{Key: "response", Val: string(splicedResponse(fr, cr))})
		}
		out = sse.AppendFrame(out, e.Name, data)
	}
	return out, nil
}
