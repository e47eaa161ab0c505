package anthropic

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
	"gatekeeper/streaming/internal/jsonscan"
	"gatekeeper/streaming/internal/reshape"
)

// assembledBlock is one content block being assembled.
type assembledBlock struct {
	index     int
	start     string // the content_block_start's block
	text      strings.Builder
	partial   strings.Builder // input_json_delta fragments
	thinking  strings.Builder
	signature string
	citations []string
	deltas    map[string]bool // delta kinds seen
}

// message is a Message assembled from its stream.
type message struct {
	base    string // message_start's message
	blocks  []*assembledBlock
	byIndex map[int]*assembledBlock
	delta   []jsonscan.Set // message_delta's delta members, the stop among them
	usage   []jsonscan.Set // message_delta's non-null usage members
	stopped bool           // a stop_reason came
}

func assemble(evs []reshape.Event) ([]byte, error) {
	m, err := readMessage(evs)
	if err != nil {
		return nil, err
	}
	return m.body()
}

func readMessage(evs []reshape.Event) (*message, error) {
	m := &message{byIndex: map[int]*assembledBlock{}}
	for i := range evs {
		js, ok, err := evs[i].JSON(streaming.APIAnthropic)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		switch typ := gjson.Get(js, "type").Str; typ {
		case "message_start":
			m.base = gjson.Get(js, "message").Raw
		case "content_block_start":
			idx := gjson.Get(js, "index")
			block := gjson.Get(js, "content_block")
			if idx.Type != gjson.Number || !block.IsObject() {
				return nil, fmt.Errorf("%w: anthropic content_block_start without index or block", streaming.ErrInvalidJSON)
			}
			b := &assembledBlock{index: int(idx.Int()), start: block.Raw, deltas: map[string]bool{}}
			if old, ok := m.byIndex[b.index]; ok {
				// A block started again at an index replaces it.
				m.blocks = slices.DeleteFunc(m.blocks, func(x *assembledBlock) bool { return x == old })
			}
			m.blocks = append(m.blocks, b)
			m.byIndex[b.index] = b
		case "content_block_delta":
			b := m.block(int(gjson.Get(js, "index").Int()))
			if b == nil {
				return nil, fmt.Errorf("%w: anthropic delta for a block that did not start", streaming.ErrInvalidJSON)
			}
			b.add(gjson.Get(js, "delta"))
		case "message_delta":
			gjson.Get(js, "delta").ForEach(func(k, v gjson.Result) bool {
				m.delta = append(m.delta, jsonscan.Set{Key: k.Str, Val: v.Raw})
				if k.Str == "stop_reason" && v.Type == gjson.String {
					m.stopped = true
				}
				return true
			})
			gjson.Get(js, "usage").ForEach(func(k, v gjson.Result) bool {
				if v.Type != gjson.Null {
					m.usage = append(m.usage, jsonscan.Set{Key: k.Str, Val: v.Raw})
				}
				return true
			})
		case "error":
			return nil, fmt.Errorf("%w: the stream ended on an error event", streaming.ErrIncompleteStream)
		}
	}
	if m.base == "" || !jsonscan.IsObject(m.base) || !m.stopped {
		return nil, streaming.ErrIncompleteStream
	}
	if gjson.Get(m.base, "type").Str != "message" {
		return nil, fmt.Errorf("%w: anthropic message_start without a message", streaming.ErrInvalidJSON)
	}
	slices.SortStableFunc(m.blocks, func(a, b *assembledBlock) int { return cmp.Compare(a.index, b.index) })
	return m, nil
}

func (m *message) block(index int) *assembledBlock { return m.byIndex[index] }

func (b *assembledBlock) add(delta gjson.Result) {
	kind := delta.Get("type").Str
	b.deltas[kind] = true
	switch kind {
	case "text_delta":
		b.text.WriteString(delta.Get("text").Str)
	case "input_json_delta":
		b.partial.WriteString(delta.Get("partial_json").Str)
	case "thinking_delta":
		b.thinking.WriteString(delta.Get("thinking").Str)
	case "signature_delta":
		b.signature = delta.Get("signature").Str
	case "citations_delta":
		if c := delta.Get("citation"); c.Exists() {
			b.citations = append(b.citations, c.Raw)
		}
	}
}

// json is the block as a Message holds it.
func (b *assembledBlock) json() (string, error) {
	var set []jsonscan.Set
	start := gjson.Parse(b.start)
	if b.deltas["text_delta"] {
		set = append(set, jsonscan.Set{Key: "text", Val: jsonscan.Quote(start.Get("text").Str + b.text.String())})
	}
	if len(b.citations) > 0 {
		prior := start.Get("citations").Array()
		all := make([]string, 0, len(prior)+len(b.citations))
		for _, c := range prior {
			all = append(all, c.Raw)
		}
		all = append(all, b.citations...)
		set = append(set, jsonscan.Set{Key: "citations", Val: "[" + strings.Join(all, ",") + "]"})
	}
	if b.deltas["thinking_delta"] {
		set = append(set, jsonscan.Set{Key: "thinking", Val: jsonscan.Quote(start.Get("thinking").Str + b.thinking.String())})
	}
	if b.deltas["signature_delta"] {
		set = append(set, jsonscan.Set{Key: "signature", Val: jsonscan.Quote(b.signature)})
	}
	if start.Get("input").Exists() || b.deltas["input_json_delta"] {
		input := strings.TrimSpace(b.partial.String())
		switch {
		case input == "":
			input = "{}"
		case !gjson.Valid(input):
			return "", fmt.Errorf("%w: the input of %s block %d", streaming.ErrInvalidJSON, start.Get("type").Str, b.index)
		}
		set = append(set, jsonscan.Set{Key: "input", Val: input})
	}
	return string(jsonscan.SetMembers(nil, b.start, set...)), nil
}

func (m *message) content() (string, error) {
	var sb strings.Builder
	sb.WriteByte('[')
	for i, b := range m.blocks {
		js, err := b.json()
		if err != nil {
			return "", err
		}
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(js)
	}
	sb.WriteByte(']')
	return sb.String(), nil
}

func (m *message) body() ([]byte, error) {
	content, err := m.content()
	if err != nil {
		return nil, err
	}
	set := append([]jsonscan.Set{{Key: "content", Val: content}}, m.delta...)
	set = append(set, jsonscan.Set{Key: "usage", Val: m.usageJSON()})
	return jsonscan.SetMembers(nil, m.base, set...), nil
}

// usageJSON is the Message's final usage: message_start's overlaid with
// the non-null usage members of its message_delta events.
func (m *message) usageJSON() string {
	usage := gjson.Get(m.base, "usage").Raw
	if !jsonscan.IsObject(usage) {
		usage = "{}"
	}
	return string(jsonscan.SetMembers(nil, usage, m.usage...))
}
