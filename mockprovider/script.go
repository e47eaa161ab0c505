package mockprovider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// ErrInvalidScript is wrapped by every error about a script or a turn spec
// that cannot be used.
var ErrInvalidScript = errors.New("invalid mock script")

// ScriptError says which field of a script (or of an X-Mock-Turn spec) is
// wrong and why.
type ScriptError struct {
	Field string // dotted path, e.g. "turns.weather.tools[0].name"
	Msg   string
}

func (e *ScriptError) Error() string {
	if e.Field == "" {
		return "mock script: " + e.Msg
	}
	return "mock script: " + e.Field + ": " + e.Msg
}

func (e *ScriptError) Unwrap() error { return ErrInvalidScript }

// Kind names what a turn does.
type Kind string

// The turn kinds. Thinking, slowness and usage are fields that apply to
// any kind.
const (
	KindText           Kind = "text"            // plain text, end_turn
	KindTool           Kind = "tool"            // one or more tool calls (several = parallel)
	KindMaxTokens      Kind = "max_tokens"      // text (or a tool call) cut at the output limit
	KindRefusal        Kind = "refusal"         // the provider's refusal shape
	KindErrorMidstream Kind = "error_midstream" // some content, then the provider's error event
	KindHTTPError      Kind = "http_error"      // an HTTP error status with the provider's error body
	KindDisconnect     Kind = "disconnect"      // some content, part of a tool call, then the connection is cut
)

var kinds = []Kind{KindText, KindTool, KindMaxTokens, KindRefusal, KindErrorMidstream, KindHTTPError, KindDisconnect}

// TurnSpec describes one reply. The zero value is a text turn echoing the
// last user message. The same fields are read from YAML (scripts) and JSON
// (the X-Mock-Turn header).
type TurnSpec struct {
	Kind Kind `yaml:"kind,omitempty" json:"kind,omitempty"`
	// Text is the reply's text: the answer (text, max_tokens), the words
	// before the tool calls (tool), the refusal (refusal), or what is
	// streamed before the failure (error_midstream, disconnect). Empty means
	// a default that fits the kind.
	Text string `yaml:"text,omitempty" json:"text,omitempty"`
	// Deltas splits Text into exactly this many deltas; 0 splits it every
	// one to three words, like the real APIs.
	Deltas int `yaml:"deltas,omitempty" json:"deltas,omitempty"`
	// Thinking adds an Anthropic thinking block (with a signature) before
	// the text and tool calls; the OpenAI APIs count it as reasoning tokens.
	Thinking string `yaml:"thinking,omitempty" json:"thinking,omitempty"`
	// Tools are the calls of a tool turn. Empty means: call the first
	// declared tool (Parallel: the first Parallel declared tools) with an
	// input made up from its schema.
	Tools    []ToolCall `yaml:"tools,omitempty" json:"tools,omitempty"`
	Parallel int        `yaml:"parallel,omitempty" json:"parallel,omitempty"`
	// CutInTool makes a max_tokens turn stop in the middle of a tool call's
	// arguments.
	CutInTool bool `yaml:"cut_in_tool,omitempty" json:"cut_in_tool,omitempty"`
	// MaxOutputTokens is where a max_tokens turn cuts its text; 0 means the
	// request's own limit when the text is longer, else half the text.
	MaxOutputTokens int `yaml:"max_output_tokens,omitempty" json:"max_output_tokens,omitempty"`
	// Status, RetryAfter, ErrorType and ErrorMessage shape errors: the HTTP
	// status of an http_error turn (0: 529 for Anthropic, 503 for OpenAI),
	// its retry-after header, and the error type and message of http_error
	// and error_midstream turns (empty: the provider's usual ones).
	Status       int      `yaml:"status,omitempty" json:"status,omitempty"`
	RetryAfter   Duration `yaml:"retry_after,omitempty" json:"retry_after,omitempty"`
	ErrorType    string   `yaml:"error_type,omitempty" json:"error_type,omitempty"`
	ErrorMessage string   `yaml:"error_message,omitempty" json:"error_message,omitempty"`
	// AfterDeltas is how many content deltas (text deltas and argument
	// fragments) go out before an error_midstream or disconnect turn fails;
	// 0 means half the text, or for disconnect half the first tool call.
	AfterDeltas int `yaml:"after_deltas,omitempty" json:"after_deltas,omitempty"`
	// EventDelay is waited between stream events, FirstByteDelay before the
	// response headers.
	EventDelay     Duration `yaml:"event_delay,omitempty" json:"event_delay,omitempty"`
	FirstByteDelay Duration `yaml:"first_byte_delay,omitempty" json:"first_byte_delay,omitempty"`
	// Stall is waited once, before the stream's event StallAt (counted
	// from 0, the first event), on top of EventDelay: a model that pauses
	// mid-reply.
	Stall   Duration `yaml:"stall,omitempty" json:"stall,omitempty"`
	StallAt int      `yaml:"stall_at,omitempty" json:"stall_at,omitempty"`
	// Usage overrides the computed token counts.
	Usage *Usage `yaml:"usage,omitempty" json:"usage,omitempty"`
	// Model overrides the model named in the reply (default: the request's).
	Model string `yaml:"model,omitempty" json:"model,omitempty"`
	// FirstOnly limits an X-Mock-Turn spec to requests whose conversation
	// does not end in tool results: a request carrying results (the next
	// turn of an agent loop, or a proxy's continuation after a refused
	// call, sent with the same headers) goes on to the directive, the
	// rules and the default ("Done: ...").
	FirstOnly bool `yaml:"first_only,omitempty" json:"first_only,omitempty"`
	// Encoding is the reply's Content-Encoding, streamed or not, error
	// replies included, whatever the request accepts: gzip, deflate
	// (zlib), br and zstd compress it, a stream event by event, each
	// flushed; any other value is sent as the header over the reply as
	// it is. Empty: a JSON body is gzipped when the request accepts gzip.
	Encoding string `yaml:"encoding,omitempty" json:"encoding,omitempty"`
	// EncodingFault breaks an Encoding reply: "cut" ends the body,
	// cleanly, halfway through the compressed bytes (of a stream's
	// middle event); "plain" sends the reply uncompressed under its
	// Content-Encoding.
	EncodingFault string `yaml:"encoding_fault,omitempty" json:"encoding_fault,omitempty"`
}

// ToolCall is one tool call of a tool turn. Input is encoded as the JSON
// object of the arguments; Arguments, when set instead, is sent verbatim
// (it may be invalid JSON on purpose).
//
// Item, for the Responses API only, makes the call an output item of that
// type instead of a function_call: local_shell_call, shell_call,
// computer_call (Input is the item's action), apply_patch_call (its
// operation), a hosted web_search_call (its action, no call_id), or any
// other type (its action, with a call_id). Name is then unused. The other
// APIs send it as a function call named Name, or the item type.
type ToolCall struct {
	Name      string `yaml:"name,omitempty" json:"name,omitempty"`
	Input     any    `yaml:"input,omitempty" json:"input,omitempty"`
	Arguments string `yaml:"arguments,omitempty" json:"arguments,omitempty"`
	Item      string `yaml:"item,omitempty" json:"item,omitempty"`
}

// Usage overrides token counts, in Anthropic's terms: InputTokens excludes
// the cache reads and writes. OpenAI replies report prompt tokens as the sum
// of the three and cached tokens as CacheReadTokens. Nil fields keep the
// computed value.
type Usage struct {
	InputTokens      *int64 `yaml:"input_tokens,omitempty" json:"input_tokens,omitempty"`
	OutputTokens     *int64 `yaml:"output_tokens,omitempty" json:"output_tokens,omitempty"`
	CacheReadTokens  *int64 `yaml:"cache_read_tokens,omitempty" json:"cache_read_tokens,omitempty"`
	CacheWriteTokens *int64 `yaml:"cache_write_tokens,omitempty" json:"cache_write_tokens,omitempty"`
	ReasoningTokens  *int64 `yaml:"reasoning_tokens,omitempty" json:"reasoning_tokens,omitempty"`
}

// Duration is a time.Duration written as "50ms", "2s" in scripts and specs.
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

func (d *Duration) parse(s string) error {
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("bad duration %q (want e.g. 50ms or 2s)", s)
	}
	*d = Duration(v)
	return nil
}

// UnmarshalYAML reads a duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: a duration must be a string like 50ms", n.Line)
	}
	if err := d.parse(n.Value); err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	return nil
}

// MarshalYAML writes the duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("a duration must be a string like 50ms")
	}
	return d.parse(s)
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// Script is what `gatekeeper mock-provider -script FILE` loads: named turns
// that requests can ask for with "mock:<name>", and rules that pick a turn
// from what a request looks like. See testdata/script.yaml.
type Script struct {
	Turns map[string]TurnSpec `yaml:"turns,omitempty"`
	Rules []Rule              `yaml:"rules,omitempty"`
}

// Rule gives Turn to requests matching When. Rules are tried in order.
type Rule struct {
	When Match   `yaml:"when"`
	Turn TurnRef `yaml:"turn"`
}

// Match is a rule's condition; empty fields match anything.
type Match struct {
	// API is anthropic, chat, responses, or openai (chat or responses).
	API string `yaml:"api,omitempty"`
	// LastUserContains looks in the user message that ends the
	// conversation. A conversation ending in tool results (Chat tool
	// messages, Responses function_call_output items) has none, so a rule
	// on the prompt does not fire again once the agent sends results.
	LastUserContains string `yaml:"last_user_contains,omitempty"`
	// HasToolResults matches requests whose tail carries tool results.
	HasToolResults *bool `yaml:"has_tool_results,omitempty"`
	// Model matches the request's model exactly, or as a prefix when it
	// ends in "*".
	Model string `yaml:"model,omitempty"`
	// DeclaresTool matches requests that declare a tool of this name: an
	// agent's side calls (titles, summaries) declare none, so a rule that
	// scripts a call of the agent's shell fires on its main turns only.
	DeclaresTool string `yaml:"declares_tool,omitempty"`
}

// TurnRef is a rule's turn: the name of a script or built-in turn, or an
// inline spec.
type TurnRef struct {
	Name string
	Spec *TurnSpec
}

// UnmarshalYAML reads a name (scalar) or an inline spec (mapping).
func (t *TurnRef) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		t.Name = n.Value
		return nil
	case yaml.MappingNode:
		// node.Decode does not inherit KnownFields, so re-decode strictly
		// to catch misspelled fields in inline specs too.
		b, err := yaml.Marshal(n)
		if err != nil {
			return err
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		var spec TurnSpec
		if err := dec.Decode(&spec); err != nil {
			return fmt.Errorf("inline turn at line %d: %w", n.Line, err)
		}
		t.Spec = &spec
		return nil
	default:
		return fmt.Errorf("line %d: turn must be a turn name or a turn spec", n.Line)
	}
}

// MarshalYAML writes the name or the spec.
func (t TurnRef) MarshalYAML() (any, error) {
	if t.Spec != nil {
		return t.Spec, nil
	}
	return t.Name, nil
}

// LoadScript reads and validates a YAML script file.
func LoadScript(path string) (*Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mock script: %w", err)
	}
	s, err := ParseScript(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// ParseScript parses and validates a YAML script. Unknown fields are
// errors, so a misspelled field never silently does nothing.
func ParseScript(data []byte) (*Script, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var s Script
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &ScriptError{Msg: "script is empty"}
		}
		return nil, &ScriptError{Msg: err.Error()}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, &ScriptError{Msg: "script holds more than one YAML document"}
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Validate checks every turn and rule; the error lists the first problem.
func (s *Script) Validate() error {
	names := make([]string, 0, len(s.Turns))
	for name := range s.Turns {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !validTurnName(name) {
			return &ScriptError{Field: "turns." + name, Msg: "turn names use only letters, digits, _ and - (they are written as mock:<name>)"}
		}
		spec := s.Turns[name]
		if err := spec.validate("turns." + name); err != nil {
			return err
		}
	}
	for i, r := range s.Rules {
		field := fmt.Sprintf("rules[%d]", i)
		switch r.When.API {
		case "", string(APIAnthropic), string(APIChat), string(APIResponses), string(APIGemini), "openai":
		default:
			return &ScriptError{Field: field + ".when.api", Msg: fmt.Sprintf("unknown api %q (want anthropic, chat, responses, gemini or openai)", r.When.API)}
		}
		switch {
		case r.Turn.Spec != nil:
			if err := r.Turn.Spec.validate(field + ".turn"); err != nil {
				return err
			}
		case r.Turn.Name == "":
			return &ScriptError{Field: field + ".turn", Msg: "missing: name a turn or give a spec"}
		default:
			if _, ok := s.Turns[r.Turn.Name]; !ok {
				if _, ok := builtinTurn(r.Turn.Name); !ok {
					return &ScriptError{Field: field + ".turn", Msg: fmt.Sprintf("no turn named %q in turns or built-ins (%s)", r.Turn.Name, strings.Join(builtinNames(), ", "))}
				}
			}
		}
	}
	return nil
}

func validTurnName(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range name {
		if !(c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// maxDelay bounds scripted waits so a typo cannot hang a test run for hours.
const maxDelay = 10 * time.Minute

func (t *TurnSpec) validate(field string) error {
	bad := func(f, msg string) error { return &ScriptError{Field: field + f, Msg: msg} }
	kind := t.Kind
	if kind == "" {
		kind = KindText
	}
	if !slices.Contains(kinds, kind) {
		ks := make([]string, len(kinds))
		for i, k := range kinds {
			ks[i] = string(k)
		}
		return bad(".kind", fmt.Sprintf("unknown kind %q (want one of %s)", t.Kind, strings.Join(ks, ", ")))
	}
	if t.Deltas < 0 || t.Parallel < 0 || t.MaxOutputTokens < 0 || t.AfterDeltas < 0 || t.StallAt < 0 {
		return bad("", "deltas, parallel, max_output_tokens, after_deltas and stall_at cannot be negative")
	}
	for _, d := range []struct {
		field string
		v     Duration
	}{{".event_delay", t.EventDelay}, {".first_byte_delay", t.FirstByteDelay}, {".retry_after", t.RetryAfter}, {".stall", t.Stall}} {
		if d.v < 0 || time.Duration(d.v) > maxDelay {
			return bad(d.field, fmt.Sprintf("must be between 0 and %s", maxDelay))
		}
	}
	if t.CutInTool && kind != KindMaxTokens {
		return bad(".cut_in_tool", "only a max_tokens turn can be cut in a tool call")
	}
	if len(t.Tools) > 0 && kind != KindTool && kind != KindMaxTokens && kind != KindDisconnect {
		return bad(".tools", fmt.Sprintf("a %s turn makes no tool calls", kind))
	}
	for i, tc := range t.Tools {
		f := fmt.Sprintf(".tools[%d]", i)
		if tc.Name == "" && tc.Item == "" {
			return bad(f+".name", "missing")
		}
		if tc.Item != "" && (!strings.HasSuffix(tc.Item, "_call") || tc.Item == "function_call" || tc.Item == "custom_tool_call") {
			return bad(f+".item", fmt.Sprintf("%q is not an output item type ending in _call other than function_call and custom_tool_call", tc.Item))
		}
		if tc.Input != nil && tc.Arguments != "" {
			return bad(f, "give input or arguments, not both")
		}
		if tc.Input != nil {
			if _, err := encodeInput(tc.Input); err != nil {
				return bad(f+".input", err.Error())
			}
		}
	}
	if t.Status != 0 && (t.Status < 400 || t.Status > 599) {
		return bad(".status", fmt.Sprintf("%d is not an HTTP error status (400-599)", t.Status))
	}
	if t.Status != 0 && kind != KindHTTPError {
		return bad(".status", "only an http_error turn has a status")
	}
	switch t.EncodingFault {
	case "", FaultCut, FaultPlain:
	default:
		return bad(".encoding_fault", fmt.Sprintf("unknown fault %q (want %s or %s)", t.EncodingFault, FaultCut, FaultPlain))
	}
	if t.EncodingFault != "" && !slices.Contains(Codings, t.Encoding) {
		return bad(".encoding_fault", "only a reply compressed in one of "+strings.Join(Codings, ", ")+" can be broken")
	}
	if u := t.Usage; u != nil {
		for _, p := range []*int64{u.InputTokens, u.OutputTokens, u.CacheReadTokens, u.CacheWriteTokens, u.ReasoningTokens} {
			if p != nil && *p < 0 {
				return bad(".usage", "token counts cannot be negative")
			}
		}
	}
	return nil
}

// encodeInput turns a tool call's input into its compact JSON object.
func encodeInput(v any) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", fmt.Errorf("cannot encode as JSON: %w", err)
	}
	out := strings.TrimSuffix(buf.String(), "\n")
	if !strings.HasPrefix(out, "{") {
		return "", errors.New("must be an object")
	}
	return out, nil
}

// parseSpecJSON reads the X-Mock-Turn header's spec strictly.
func parseSpecJSON(data string) (TurnSpec, error) {
	dec := json.NewDecoder(strings.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber() // keep numbers in tool inputs exactly as written
	var spec TurnSpec
	if err := dec.Decode(&spec); err != nil {
		return TurnSpec{}, &ScriptError{Field: HeaderTurn, Msg: err.Error()}
	}
	if dec.More() {
		return TurnSpec{}, &ScriptError{Field: HeaderTurn, Msg: "trailing data after the spec"}
	}
	if err := spec.validate(HeaderTurn); err != nil {
		return TurnSpec{}, err
	}
	return spec, nil
}

// builtinTurn returns the turn for a built-in "mock:<name>" directive.
func builtinTurn(name string) (TurnSpec, bool) {
	switch name {
	case "text":
		return TurnSpec{Kind: KindText}, true
	case "tool":
		return TurnSpec{Kind: KindTool}, true
	case "parallel":
		return TurnSpec{Kind: KindTool, Parallel: 2}, true
	case "max_tokens":
		return TurnSpec{Kind: KindMaxTokens}, true
	case "max_tokens_tool":
		return TurnSpec{Kind: KindMaxTokens, CutInTool: true}, true
	case "refusal":
		return TurnSpec{Kind: KindRefusal}, true
	case "error":
		return TurnSpec{Kind: KindErrorMidstream}, true
	case "disconnect":
		return TurnSpec{Kind: KindDisconnect}, true
	case "slow":
		return TurnSpec{Kind: KindText, EventDelay: Duration(50 * time.Millisecond)}, true
	case "thinking":
		return TurnSpec{Kind: KindText, Thinking: defaultThinking}, true
	case "thinking_tool":
		return TurnSpec{Kind: KindTool, Thinking: defaultThinking}, true
	case "overloaded":
		return TurnSpec{Kind: KindHTTPError}, true
	case "rate_limit":
		return TurnSpec{Kind: KindHTTPError, Status: 429, RetryAfter: Duration(time.Second)}, true
	}
	return TurnSpec{}, false
}

func builtinNames() []string {
	return []string{"text", "tool", "parallel", "max_tokens", "max_tokens_tool", "refusal", "error",
		"disconnect", "slow", "thinking", "thinking_tool", "overloaded", "rate_limit"}
}
