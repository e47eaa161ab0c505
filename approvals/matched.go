package approvals

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/parser"
)

// Match is a part of a call that a gate's condition matched, so that an
// approver of a long call sees the part that made it dangerous even when
// the middle of the call is elided. It is found from the condition's own
// string tests on tool.input: the span a matches() regular expression
// matched, the text contains(), startsWith() or endsWith() found. A
// condition without such tests yields none; the whole call is still one
// click away (the admin API, `gatekeeper approvals show`).
type Match struct {
	// Where is the test of the condition, as CEL.
	Where string `json:"where"`
	// Before, Text and After are the matched text and up to
	// matchContext characters either side of it, invisible characters
	// escaped (see Visible); a long Text keeps its head and its tail.
	Before string `json:"before"`
	Text   string `json:"text"`
	After  string `json:"after"`
	// At is the character offset of Text in the tested value, Of the
	// value's length in characters.
	At int `json:"at"`
	Of int `json:"of"`
}

// Bounds of the matched parts kept on a request.
const (
	matchContext  = 60  // characters shown either side of a match
	matchMaxText  = 300 // characters of one match's own text
	matchesPerUse = 3   // spans of one test
	maxMatches    = 6   // matched parts of one request
)

// stringTest is one string test of a condition whose subject reads
// tool.input: subject.fn(arg), or matches(subject, arg).
type stringTest struct {
	where   string
	fn      string
	subject cel.Program
	arg     cel.Program
}

var stringTestFuncs = map[string]bool{"matches": true, "contains": true, "startsWith": true, "endsWith": true}

// stringTests finds the string tests of a checked condition. A test whose
// subject or argument cannot be evaluated on its own (it reads a
// comprehension's variable) is left out.
func stringTests(env *cel.Env, checked *cel.Ast) []stringTest {
	native := checked.NativeRep()
	info := native.SourceInfo()
	var out []stringTest
	ast.PreOrderVisit(native.Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		if e.Kind() != ast.CallKind {
			return
		}
		c := e.AsCall()
		fn := c.FunctionName()
		if !stringTestFuncs[fn] {
			return
		}
		var subject, arg ast.Expr
		switch args := c.Args(); {
		case c.IsMemberFunction() && len(args) == 1:
			subject, arg = c.Target(), args[0]
		case !c.IsMemberFunction() && fn == "matches" && len(args) == 2:
			subject, arg = args[0], args[1]
		default:
			return
		}
		if !readsInput(subject) {
			return
		}
		where, err1 := parser.Unparse(e, info)
		subjectSrc, err2 := parser.Unparse(subject, info)
		argSrc, err3 := parser.Unparse(arg, info)
		if err1 != nil || err2 != nil || err3 != nil {
			return
		}
		sp, ok1 := stringProgram(env, subjectSrc)
		ap, ok2 := stringProgram(env, argSrc)
		if ok1 && ok2 {
			out = append(out, stringTest{where: where, fn: fn, subject: sp, arg: ap})
		}
	}))
	return out
}

// inputFields are the members of tool read from the call's input.
var inputFields = map[string]bool{"input": true, "command": true, "path": true, "url": true}

// readsInput reports whether e reads tool.input (or tool["input"]), or
// what comes of it: tool.command, tool.path, tool.url.
func readsInput(e ast.Expr) bool {
	found := false
	ast.PreOrderVisit(e, ast.NewExprVisitor(func(e ast.Expr) {
		switch e.Kind() {
		case ast.SelectKind:
			s := e.AsSelect()
			if inputFields[s.FieldName()] && s.Operand().Kind() == ast.IdentKind && s.Operand().AsIdent() == "tool" {
				found = true
			}
		case ast.CallKind:
			c := e.AsCall()
			if args := c.Args(); c.FunctionName() == "_[_]" && len(args) == 2 &&
				args[0].Kind() == ast.IdentKind && args[0].AsIdent() == "tool" &&
				args[1].Kind() == ast.LiteralKind && inputFields[fmt.Sprint(args[1].AsLiteral().Value())] {
				found = true
			}
		}
	}))
	return found
}

func stringProgram(env *cel.Env, src string) (cel.Program, bool) {
	checked, iss := env.Compile(src)
	if iss.Err() != nil {
		return nil, false
	}
	p, err := env.Program(checked, cel.EvalOptions(cel.OptOptimize), cel.CostLimit(evalCostLimit))
	return p, err == nil
}

// matches evaluates the gate's string tests on in and returns the parts
// they matched, at most maxMatches.
func (gate *Gate) matches(in Input) []Match {
	if len(gate.tests) == 0 {
		return nil
	}
	vars := in.vars(true)
	var out []Match
	for _, t := range gate.tests {
		subject, ok := evalString(t.subject, vars)
		if !ok {
			continue
		}
		arg, ok := evalString(t.arg, vars)
		if !ok {
			continue
		}
		for _, span := range t.spans(subject, arg) {
			if len(out) == maxMatches {
				return out
			}
			out = append(out, newMatch(t.where, subject, span[0], span[1]))
		}
	}
	return out
}

func evalString(p cel.Program, vars map[string]any) (string, bool) {
	v, _, err := p.Eval(vars)
	if err != nil || v == nil {
		return "", false
	}
	s, ok := v.Value().(string)
	return s, ok
}

// spans returns the byte spans of subject the test matched, none when it
// did not match.
func (t stringTest) spans(subject, arg string) [][2]int {
	switch t.fn {
	case "matches":
		re, err := regexp.Compile(arg) // the syntax CEL's matches() uses
		if err != nil {
			return nil
		}
		var out [][2]int
		for _, m := range re.FindAllStringIndex(subject, matchesPerUse) {
			out = append(out, [2]int{m[0], m[1]})
		}
		return out
	case "contains":
		if i := strings.Index(subject, arg); i >= 0 {
			return [][2]int{{i, i + len(arg)}}
		}
	case "startsWith":
		if strings.HasPrefix(subject, arg) {
			return [][2]int{{0, len(arg)}}
		}
	case "endsWith":
		if strings.HasSuffix(subject, arg) {
			return [][2]int{{len(subject) - len(arg), len(subject)}}
		}
	}
	return nil
}

// newMatch shows subject[i:j] with its context.
func newMatch(where, subject string, i, j int) Match {
	before := subject[:i]
	if n := utf8.RuneCountInString(before); n > matchContext {
		r := []rune(before)
		before = "…" + Visible(string(r[n-matchContext:]))
	} else {
		before = Visible(before)
	}
	after := subject[j:]
	if n := utf8.RuneCountInString(after); n > matchContext {
		after = Visible(string([]rune(after)[:matchContext])) + "…"
	} else {
		after = Visible(after)
	}
	return Match{
		Where:  Visible(where),
		Before: before,
		Text:   Excerpt(subject[i:j], matchMaxText, nil),
		After:  after,
		At:     utf8.RuneCountInString(subject[:i]),
		Of:     utf8.RuneCountInString(subject),
	}
}
