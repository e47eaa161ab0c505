package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Sentinel errors; the typed errors below match them with errors.Is.
var (
	// ErrParse: the file could not be read as a config (see *ParseError).
	ErrParse = errors.New("config: cannot parse")
	// ErrInvalid: the config parsed but breaks a rule (see *ValidationError).
	ErrInvalid = errors.New("config: invalid")
)

// Problem is one thing wrong with the file, at a line (0 when unknown).
type Problem struct {
	Line int
	Msg  string
}

// ParseError lists every problem found while reading the file: malformed
// YAML, unknown keys, values of the wrong type, malformed ${...} references.
type ParseError struct {
	File     string // set by Load
	Problems []Problem
}

// Error prints one problem per line, as "file:line: message".
func (e *ParseError) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		switch {
		case e.File != "" && p.Line > 0:
			fmt.Fprintf(&b, "%s:%d: %s", e.File, p.Line, p.Msg)
		case e.File != "":
			fmt.Fprintf(&b, "%s: %s", e.File, p.Msg)
		case p.Line > 0:
			fmt.Fprintf(&b, "line %d: %s", p.Line, p.Msg)
		default:
			b.WriteString(p.Msg)
		}
	}
	return b.String()
}

// Is makes errors.Is(err, ErrParse) true.
func (e *ParseError) Is(target error) bool { return target == ErrParse }

// Load reads the file at path and parses it (see Parse).
func Load(path string, getenv func(string) string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(data, getenv)
	if pe, ok := errors.AsType[*ParseError](err); ok {
		pe.File = path
	}
	return c, err
}

// Check is what `check-config` and `serve` run: Load, then Validate. The
// error, if any, is a *ParseError or a *ValidationError (or an I/O error)
// whose message lists every problem, one per line. The config is returned
// whenever it parsed, valid or not.
func Check(path string, getenv func(string) string) (*Config, error) {
	c, err := Load(path, getenv)
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c, nil
}

// Parse reads one YAML document over DefaultConfig, expanding ${VAR}
// references from getenv (nil means no variable is set). Unknown keys and
// values of the wrong type are reported, all of them, as a *ParseError. Parse
// does not validate: call Validate.
func Parse(data []byte, getenv func(string) string) (*Config, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return nil, &ParseError{Problems: yamlProblems(err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		line := extra.Line
		if err != nil {
			return nil, &ParseError{Problems: yamlProblems(err)}
		}
		return nil, &ParseError{Problems: []Problem{{Line: line, Msg: "a config file holds one YAML document; found a second"}}}
	}

	c := DefaultConfig()
	w := walker{
		getenv:   getenv,
		env:      map[string]envSource{},
		visited:  map[visit]bool{},
		expanded: map[*yaml.Node]envSource{},
	}
	if root.Kind != 0 {
		w.walk(&root, reflect.TypeFor[Config](), "")
		if err := root.Decode(c); err != nil {
			w.problems = append(w.problems, yamlProblems(err)...)
		}
	}
	if len(w.problems) > 0 {
		return nil, &ParseError{Problems: capProblems(w.problems)}
	}
	c.applyElementDefaults()
	c.applyRunLimitDefaults(&root)
	if len(w.env) > 0 {
		c.env = w.env
	}
	return c, nil
}

// maxProblems keeps the report of a badly broken file (or one that aliases
// a bad value many times over) readable.
const maxProblems = 100

func capProblems(ps []Problem) []Problem {
	if len(ps) <= maxProblems {
		return ps
	}
	more := len(ps) - maxProblems
	return append(ps[:maxProblems:maxProblems], Problem{Msg: fmt.Sprintf("... and %d more problems", more)})
}

// yamlProblems splits a yaml error into problems, pulling out the line
// numbers the package writes as "line N: ".
func yamlProblems(err error) []Problem {
	var msgs []string
	if te, ok := errors.AsType[*yaml.TypeError](err); ok {
		msgs = te.Errors
	} else {
		msgs = []string{strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	out := make([]Problem, 0, len(msgs))
	for _, m := range msgs {
		p := Problem{Msg: m}
		if rest, ok := strings.CutPrefix(m, "line "); ok {
			num, msg, found := strings.Cut(rest, ": ")
			if n, err := strconv.Atoi(num); found && err == nil {
				p = Problem{Line: n, Msg: msg}
			}
		}
		out = append(out, p)
	}
	return out
}

// walker goes over the parsed YAML tree alongside the Go type it will be
// decoded into. It does what the decoder cannot do on a yaml.Node: reject
// unknown keys with their line (KnownFields works only when decoding from
// bytes, and re-encoding would lose the file's line numbers), and expand
// ${VAR} in the string scalars while knowing each one's field path and
// target type.
type walker struct {
	getenv   func(string) string
	env      map[string]envSource
	problems []Problem
	// visited bounds the walk: with aliases a small file can describe an
	// exponentially large tree, but each (node, type) pair is walked once.
	visited map[visit]bool
	// expanded keeps a node reached again through an alias from being
	// expanded twice (which would turn an escaped $${X} into a reference).
	expanded map[*yaml.Node]envSource
}

type visit struct {
	n *yaml.Node
	t reflect.Type
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

func (w *walker) problem(n *yaml.Node, format string, args ...any) {
	w.problems = append(w.problems, Problem{Line: n.Line, Msg: fmt.Sprintf(format, args...)})
}

func (w *walker) walk(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind == yaml.DocumentNode {
		for _, c := range n.Content {
			w.walk(c, t, path)
		}
		return
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return
		}
		n = n.Alias
	}
	key := visit{n, t}
	if w.visited[key] {
		return
	}
	w.visited[key] = true

	if reflect.PointerTo(t).Implements(unmarshalerType) {
		if n.Kind == yaml.ScalarNode {
			w.expandScalar(n, t, path)
		}
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		w.walk(n, t.Elem(), path)
	case reflect.Struct:
		if n.Kind == yaml.MappingNode {
			w.walkStruct(n, t, path)
		}
	case reflect.Slice:
		if n.Kind == yaml.SequenceNode {
			for i, item := range n.Content {
				w.walk(item, t.Elem(), indexPath(path, i))
			}
		}
	case reflect.Map:
		if n.Kind == yaml.MappingNode {
			w.walkMap(n, t, path)
		}
	default:
		if n.Kind == yaml.ScalarNode {
			w.expandScalar(n, t, path)
		}
	}
}

func isMergeKey(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && k.ShortTag() == "!!merge"
}

// walkMerge follows a merge key's value, a mapping or a list of them, which
// contributes fields to the mapping that holds it.
func (w *walker) walkMerge(v *yaml.Node, t reflect.Type, path string) {
	if v.Kind == yaml.AliasNode && v.Alias != nil {
		v = v.Alias
	}
	if v.Kind == yaml.SequenceNode {
		for _, item := range v.Content {
			w.walk(item, t, path)
		}
		return
	}
	w.walk(v, t, path)
}

func (w *walker) walkStruct(n *yaml.Node, t reflect.Type, path string) {
	fields := yamlFields(t)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if isMergeKey(k) {
			w.walkMerge(v, t, path)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			continue // the decoder reports a non-scalar key
		}
		ft, ok := fields[k.Value]
		if !ok {
			if path == "" {
				w.problem(k, "unknown field %q", k.Value)
			} else {
				w.problem(k, "unknown field %q in %s", k.Value, path)
			}
			continue
		}
		w.walk(v, ft, fieldPath(path, k.Value))
	}
}

func (w *walker) walkMap(n *yaml.Node, t reflect.Type, path string) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if isMergeKey(k) {
			w.walkMerge(v, t, path)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			continue
		}
		w.walk(v, t.Elem(), keyPath(path, k.Value))
	}
}

// yamlFields maps the YAML keys of struct type t to their field types,
// following the yaml package's rules (lowercased field name by default,
// "-" skipped, ",inline" structs flattened).
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if strings.Contains(","+opts+",", ",inline,") && f.Type.Kind() == reflect.Struct {
			for k, v := range yamlFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}

// expandScalar expands the ${VAR} references of one string scalar in place
// and records where the field's value came from.
//
// The node's tag is then set for the field's type: a string field keeps
// !!str, so a variable holding "null", "true" or "123" stays that exact
// string; any other field lets the expanded text resolve like a plain
// scalar, so `rpm: ${RPM}` works. A value that does not fit the field is
// reported without quoting it (it may be a secret placed in the wrong field)
// and blanked, so the decoder does not quote it either.
func (w *walker) expandScalar(n *yaml.Node, t reflect.Type, path string) {
	if src, done := w.expanded[n]; done {
		if t.Kind() != reflect.String {
			w.checkFits(n, t, path, src)
		}
		return
	}
	if n.ShortTag() != "!!str" || !strings.Contains(n.Value, "$") {
		return
	}
	v, src, err := expand(n.Value, w.getenv)
	if err != nil {
		w.problem(n, "%s: %v", path, err)
		blank(n)
		return
	}
	n.Value = v
	if len(src.vars) == 0 {
		return // only $$ escapes: the value is the file's own text
	}
	src.line = n.Line
	w.env[path] = src
	w.expanded[n] = src
	if t.Kind() == reflect.String {
		n.Tag = "!!str"
		return
	}
	if n.Style&yaml.TaggedStyle == 0 {
		n.Tag = ""
		n.Style = 0
	}
	w.checkFits(n, t, path, src)
}

func (w *walker) checkFits(n *yaml.Node, t reflect.Type, path string, src envSource) {
	if err := n.Decode(reflect.New(t).Interface()); err != nil {
		w.problem(n, "%s: the value of ${%s} is not a valid %s", path, strings.Join(src.vars, "}, ${"), typeWord(t))
		blank(n)
	}
}

func blank(n *yaml.Node) {
	n.Tag, n.Value, n.Style = "!!null", "", 0
}

func typeWord(t reflect.Type) string {
	if t == reflect.TypeFor[Duration]() {
		return "duration"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	}
	return t.String()
}

// applyRunLimitDefaults bounds the runs of each tenant whose limits do not
// name max_live_trajectories or new_trajectories_per_hour by the defaults:
// a tenant without config cannot start runs without bound. Only a written
// 0 means none. Whether a key is written is read from the file's tree as
// the decoder reads it (aliases, merge keys), since a decoded 0 cannot
// tell.
func (c *Config) applyRunLimitDefaults(root *yaml.Node) {
	tenants := deref(member(deref(root), "tenants", 0))
	for i := range c.Tenants {
		var limits *yaml.Node
		if tenants != nil && tenants.Kind == yaml.SequenceNode && i < len(tenants.Content) {
			limits = member(tenants.Content[i], "limits", 0)
		}
		lim := &c.Tenants[i].Limits
		if member(limits, "max_live_trajectories", 0) == nil {
			lim.MaxLiveTrajectories = DefaultMaxLiveTrajectories
		}
		if member(limits, "new_trajectories_per_hour", 0) == nil {
			lim.NewTrajectoriesPerHour = DefaultNewTrajectoriesPerHour
		}
	}
}

// maxMergeDepth bounds member's walk through merge keys.
const maxMergeDepth = 16

// deref is n, or what an alias n names; a document's content.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && i < maxMergeDepth; i++ {
		switch {
		case n.Kind == yaml.AliasNode:
			n = n.Alias
		case n.Kind == yaml.DocumentNode && len(n.Content) == 1:
			n = n.Content[0]
		default:
			return n
		}
	}
	return n
}

// member is the value of key in the mapping n as the decoder reads it:
// the mapping's own key, else the first merged mapping (<<) that has it.
// nil when n is no mapping or none has it.
func member(n *yaml.Node, key string, depth int) *yaml.Node {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode || depth > maxMergeDepth {
		return nil
	}
	var merged []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if isMergeKey(k) {
			merged = append(merged, v)
			continue
		}
		if k.Kind == yaml.ScalarNode && k.Value == key {
			return v
		}
	}
	for _, m := range merged {
		m = deref(m)
		items := []*yaml.Node{m}
		if m != nil && m.Kind == yaml.SequenceNode {
			items = m.Content
		}
		for _, it := range items {
			if v := member(it, key, depth+1); v != nil {
				return v
			}
		}
	}
	return nil
}
