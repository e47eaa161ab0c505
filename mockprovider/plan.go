package mockprovider

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

type stopReason int

const (
	stopEndTurn stopReason = iota
	stopToolUse
	stopMaxTokens
	stopRefusal
)

type failKind int

const (
	failNone       failKind = iota
	failError               // the provider's error event in the stream
	failDisconnect          // the connection is cut
	failHTTP                // an HTTP error status instead of a reply
)

// plan is one reply, decided before any byte is written: the same plan
// renders as any API's stream or JSON body.
type plan struct {
	api     API
	req     *turnRequest
	model   string
	created time.Time

	id          string // msg_01…, chatcmpl-…, resp_…
	itemID      string // Responses: the message item's id
	fingerprint string // Chat: system_fingerprint

	thinking       string
	thinkingDeltas []string
	signature      string

	text       string
	textDeltas []string
	refusal    bool // text is a refusal

	calls []planCall
	stop  stopReason
	usage usageCounts

	fail       failKind
	failAfter  int // content deltas (text deltas + argument fragments) before the failure
	status     int
	errType    string
	errMessage string
	retryAfter time.Duration

	eventDelay     time.Duration
	firstByteDelay time.Duration
	stall          time.Duration // waited before event stallAt
	stallAt        int
}

type planCall struct {
	id     string // toolu_01…, call_…
	itemID string // Responses: fc_…
	name   string
	args   string
	item   string // Responses: the output item type when not a function_call
	frags  []string
	cut    bool // the arguments stop in the middle (max_tokens)
}

// usageCounts are in Anthropic's terms: input excludes cache reads and
// writes; output includes reasoning.
type usageCounts struct {
	input, cacheRead, cacheWrite, output, reasoning int64
}

func (u usageCounts) promptTotal() int64 { return u.input + u.cacheRead + u.cacheWrite }

const (
	defaultThinking = "The user wants a short answer. I will keep it brief and make sure it is correct before replying."
	defaultLongText = "Here is a longer answer that keeps going for a while. It explains the first point in some detail, " +
		"then moves on to the second point, which needs a few more sentences to cover properly. After that it " +
		"lists several examples, each with a short explanation, and it closes with a summary that repeats the " +
		"main ideas so that nothing important is missed by a reader who skims."
	defaultRefusal    = "I'm sorry, but I can't help with that request."
	defaultErrorText  = "I will start on this now. First I look at the request, then I write the answer step by step."
	defaultDisconnect = "Let me check that."
	noToolsText       = "There is no tool to call: the request declares none."
)

// buildPlan resolves spec against the request. It draws every random
// choice from rnd, so a seeded source gives the same reply every time.
func buildPlan(spec TurnSpec, req *turnRequest, rnd *rand.Rand, now time.Time) *plan {
	p := &plan{
		api:            req.api,
		req:            req,
		model:          req.model,
		created:        now,
		eventDelay:     time.Duration(spec.EventDelay),
		firstByteDelay: time.Duration(spec.FirstByteDelay),
		stall:          time.Duration(spec.Stall),
		stallAt:        spec.StallAt,
		retryAfter:     time.Duration(spec.RetryAfter),
	}
	if spec.Model != "" {
		p.model = spec.Model
	}
	switch req.api {
	case APIAnthropic:
		p.id = "msg_01" + base62(rnd, 22)
	case APIChat:
		p.id = "chatcmpl-" + base62(rnd, 29)
		p.fingerprint = "fp_" + hexString(rnd, 10)
	case APIResponses:
		p.id = "resp_" + hexString(rnd, 48)
		p.itemID = "msg_" + hexString(rnd, 48)
	case APIGemini:
		p.id = geminiResponseID(rnd)
	}

	kind := spec.Kind
	if kind == "" {
		kind = KindText
	}
	limitTokens := int64(0) // set when a known output limit cut the reply
	switch kind {
	case KindText:
		p.text = orDefault(spec.Text, echoText(req))
	case KindTool:
		p.calls = resolveCalls(spec, req)
		if len(p.calls) == 0 {
			p.text = noToolsText
			break
		}
		p.text = spec.Text
		p.stop = stopToolUse
	case KindMaxTokens:
		p.stop = stopMaxTokens
		if spec.CutInTool {
			p.text = spec.Text
			calls := resolveCalls(spec, req)
			if len(calls) == 0 {
				calls = []planCall{{name: "Bash", args: `{"command":"echo hello"}`}}
			}
			c := calls[0]
			c.args = cutHalf(c.args)
			c.cut = true
			p.calls = []planCall{c}
			break
		}
		text := orDefault(spec.Text, defaultLongText)
		limit := int64(spec.MaxOutputTokens)
		if limit == 0 && req.maxTokens > 0 && req.maxTokens*4 < int64(len(text)) {
			limit = req.maxTokens
		}
		if limit > 0 {
			p.text = cutBytes(text, int(limit*4))
			limitTokens = limit
		} else {
			p.text = cutHalf(text)
		}
	case KindRefusal:
		p.text = orDefault(spec.Text, defaultRefusal)
		p.refusal = true
		p.stop = stopRefusal
	case KindErrorMidstream:
		p.text = orDefault(spec.Text, defaultErrorText)
		p.fail = failError
	case KindHTTPError:
		p.fail = failHTTP
		p.status = spec.Status
	case KindDisconnect:
		p.text = orDefault(spec.Text, defaultDisconnect)
		p.calls = resolveCalls(spec, req)
		if len(p.calls) == 0 {
			p.calls = []planCall{{name: "Bash", args: `{"command":"echo hello"}`}}
		}
		p.calls = p.calls[:1]
		p.stop = stopToolUse
		p.fail = failDisconnect
	}
	if p.fail == failError && !req.stream {
		// A reply that is not streamed cannot fail half way: the API
		// answers with the error status instead.
		p.fail = failHTTP
	}
	if p.fail == failHTTP {
		p.text, p.calls = "", nil
		p.status, p.errType, p.errMessage = errorShape(req.api, p.status, spec.ErrorType, spec.ErrorMessage)
	} else {
		p.errType, p.errMessage = midstreamError(req.api, spec.ErrorType, spec.ErrorMessage)
	}

	if spec.Thinking != "" && p.fail != failHTTP {
		p.thinking = spec.Thinking
		p.thinkingDeltas = splitWords(rnd, p.thinking)
		p.signature = base64.StdEncoding.EncodeToString(randomBytes(rnd, 240))
	}
	if p.text != "" {
		if spec.Deltas > 0 {
			p.textDeltas = splitN(p.text, spec.Deltas)
		} else {
			p.textDeltas = splitWords(rnd, p.text)
		}
	}
	for i := range p.calls {
		c := &p.calls[i]
		switch req.api {
		case APIAnthropic:
			c.id = "toolu_01" + base62(rnd, 22)
		case APIChat:
			c.id = "call_" + base62(rnd, 24)
		case APIResponses:
			c.id = "call_" + base62(rnd, 24)
			c.itemID = itemIDPrefix(c.item) + hexString(rnd, 48)
		}
		c.frags = fragments(rnd, c.args)
	}

	switch p.fail {
	case failError:
		p.failAfter = spec.AfterDeltas
		if p.failAfter == 0 {
			p.failAfter = max(1, len(p.textDeltas)/2)
		}
	case failDisconnect:
		p.failAfter = spec.AfterDeltas
		if p.failAfter == 0 {
			p.failAfter = len(p.textDeltas) + max(1, len(p.calls[0].frags)/2)
		}
	}

	p.usage = computeUsage(req, p, limitTokens)
	applyUsage(&p.usage, spec.Usage)
	return p
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// echoText is the default reply: short, and never a tool call, so that a
// real agent loop ends after one turn unless it is told otherwise.
func echoText(req *turnRequest) string {
	if req.toolResults > 0 {
		s := fmt.Sprintf("Done: received %d tool result", req.toolResults)
		if req.toolResults > 1 {
			s += "s"
		}
		if r := summarize(req.firstResult, 80); r != "" {
			s += fmt.Sprintf(" (first: %q)", r)
		}
		return s + "."
	}
	if t := summarize(req.lastUserText, 120); t != "" {
		return "You said: " + t
	}
	return "You said nothing I could read."
}

// summarize collapses whitespace and shortens s to at most n runes.
func summarize(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// resolveCalls gives the spec's tool calls, or calls to the request's
// first declared tools with inputs made up from their schemas.
func resolveCalls(spec TurnSpec, req *turnRequest) []planCall {
	if len(spec.Tools) > 0 {
		calls := make([]planCall, 0, len(spec.Tools))
		for _, t := range spec.Tools {
			args := t.Arguments
			if args == "" && t.Input != nil {
				args, _ = encodeInput(t.Input) // validated when the spec was read
			}
			if args == "" {
				args = "{}"
				if d, ok := findTool(req.tools, t.Name); ok {
					args = plausibleInput(d)
				}
			}
			name := t.Name
			if name == "" {
				name = t.Item // how the APIs without call items name it
			}
			calls = append(calls, planCall{name: name, args: args, item: t.Item})
		}
		return calls
	}
	n := max(1, spec.Parallel)
	if len(req.tools) == 0 {
		return nil
	}
	calls := make([]planCall, 0, n)
	for i := range n {
		d := req.tools[i%len(req.tools)]
		calls = append(calls, planCall{name: d.name, args: plausibleInput(d)})
	}
	return calls
}

func findTool(tools []declaredTool, name string) (declaredTool, bool) {
	for _, t := range tools {
		if t.name == name {
			return t, true
		}
	}
	return declaredTool{}, false
}

var shellTools = []string{"Bash", "bash", "exec_command", "shell", "local_shell"}

// plausibleInput makes up arguments that satisfy the tool's schema: every
// required property gets an example value, shell commands get a harmless
// command.
func plausibleInput(t declaredTool) string {
	props := map[string]gjson.Result{}
	var order []string
	t.schema.Get("properties").ForEach(func(k, v gjson.Result) bool {
		props[k.String()] = v
		order = append(order, k.String())
		return true
	})
	if len(props) == 0 {
		if slices.Contains(shellTools, t.name) {
			return `{"command":"echo hello"}`
		}
		return "{}"
	}
	var names []string
	for _, r := range t.schema.Get("required").Array() {
		if _, ok := props[r.String()]; ok {
			names = append(names, r.String())
		}
	}
	if len(names) == 0 {
		for _, k := range order {
			if k == "command" || k == "cmd" {
				names = append(names, k)
			}
		}
	}
	o := obj{}
	for _, name := range names {
		o = o.set(name, exampleValue(name, props[name]))
	}
	return string(appendJSON(nil, o))
}

func exampleValue(name string, prop gjson.Result) any {
	if enum := prop.Get("enum").Array(); len(enum) > 0 {
		return compactRaw(enum[0].Raw)
	}
	typ := prop.Get("type")
	if typ.IsArray() && len(typ.Array()) > 0 {
		typ = typ.Array()[0]
	}
	isCommand := name == "command" || name == "cmd" || name == "script"
	switch typ.String() {
	case "array":
		if isCommand {
			return []any{"bash", "-lc", "echo hello"}
		}
		if prop.Get("items.type").String() == "string" {
			return []any{"example"}
		}
		return []any{}
	case "integer", "number":
		return 1
	case "boolean":
		return false
	case "object":
		return obj{}
	}
	switch {
	case isCommand:
		return "echo hello"
	case strings.Contains(name, "path") || strings.Contains(name, "file"):
		return "/tmp/example.txt"
	}
	return "example"
}

// splitWords splits s the way model tokens stream: every delta is one to
// three words, each word carrying the whitespace before it.
func splitWords(rnd *rand.Rand, s string) []string {
	var words []string
	for i := 0; i < len(s); {
		j := skip(s, i, true)
		j = skip(s, j, false)
		words = append(words, s[i:j])
		i = j
	}
	var out []string
	for i := 0; i < len(words); {
		n := min(1+rnd.IntN(3), len(words)-i)
		out = append(out, strings.Join(words[i:i+n], ""))
		i += n
	}
	return out
}

// skip advances from i over runes that are (space) or are not (!space)
// white space.
func skip(s string, i int, space bool) int {
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if unicode.IsSpace(r) != space {
			break
		}
		i += size
	}
	return i
}

// splitN splits s into n pieces of nearly equal rune counts (fewer when s
// has fewer runes).
func splitN(s string, n int) []string {
	runes := []rune(s)
	n = min(n, len(runes))
	if n <= 1 {
		return []string{s}
	}
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, string(runes[i*len(runes)/n:(i+1)*len(runes)/n]))
	}
	return out
}

// fragments splits tool arguments the way the APIs stream them: pieces of
// one to six characters at arbitrary points, including right inside an
// escape sequence, never inside a UTF-8 character.
func fragments(rnd *rand.Rand, args string) []string {
	if args == "" {
		return nil
	}
	var cuts []int
	forced := strings.IndexByte(args, '\\')
	pos := 0
	for pos < len(args) {
		n := 1 + rnd.IntN(6)
		next := pos
		for range n {
			if next >= len(args) {
				break
			}
			_, size := utf8.DecodeRuneInString(args[next:])
			next += size
		}
		if forced >= pos && forced+1 < next && forced+1 < len(args) {
			next = forced + 1 // end this fragment on the backslash
		}
		cuts = append(cuts, next)
		pos = next
	}
	if len(cuts) == 1 && len(args) > 1 {
		// At least two fragments, so that "part of the arguments" exists.
		_, size := utf8.DecodeRuneInString(args)
		cuts = []int{size, len(args)}
	}
	out := make([]string, 0, len(cuts))
	prev := 0
	for _, c := range cuts {
		out = append(out, args[prev:c])
		prev = c
	}
	return out
}

// cutBytes shortens s to at most n bytes without splitting a character.
func cutBytes(s string, n int) string {
	if n >= len(s) {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// cutHalf keeps the first half of s: at least one character, never all of
// it when s has two or more.
func cutHalf(s string) string {
	n := utf8.RuneCountInString(s)
	if n < 2 {
		return s
	}
	return string([]rune(s)[:n/2])
}

// tokens estimates a token count from a byte count, as ~4 bytes a token.
func tokens(n int) int64 { return int64((n + 3) / 4) }

func computeUsage(req *turnRequest, p *plan, limitTokens int64) usageCounts {
	var u usageCounts
	total := max(1, tokens(len(req.body)))
	switch req.api {
	case APIAnthropic:
		u.cacheRead = int64(cachedPrefix(req.body) / 4)
		u.input = max(0, total-u.cacheRead)
	default:
		// OpenAI caches prompts of 1024 tokens or more, in 128-token steps.
		u.input = total
		if total >= 1024 {
			u.cacheRead = total / 2 / 128 * 128
			u.input = total - u.cacheRead
		}
	}
	generated := len(p.text)
	for _, c := range p.calls {
		generated += len(c.name) + len(c.args)
	}
	if p.fail == failHTTP {
		return u
	}
	u.reasoning = tokens(len(p.thinking))
	u.output = max(1, tokens(generated)+u.reasoning)
	if limitTokens > 0 {
		u.output = limitTokens
	}
	return u
}

func applyUsage(u *usageCounts, o *Usage) {
	if o == nil {
		return
	}
	set := func(dst *int64, src *int64) {
		if src != nil {
			*dst = *src
		}
	}
	set(&u.input, o.InputTokens)
	set(&u.output, o.OutputTokens)
	set(&u.cacheRead, o.CacheReadTokens)
	set(&u.cacheWrite, o.CacheWriteTokens)
	set(&u.reasoning, o.ReasoningTokens)
}

const base62Chars = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

func base62(rnd *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = base62Chars[rnd.IntN(len(base62Chars))]
	}
	return string(b)
}

func hexString(rnd *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = hexDigits[rnd.IntN(16)]
	}
	return string(b)
}

func randomBytes(rnd *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rnd.Uint32())
	}
	return b
}
