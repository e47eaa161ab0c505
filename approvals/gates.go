package approvals

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/ext"

	"gatekeeper/config"
)

// evalCostLimit bounds one evaluation of a condition: a condition that
// would run longer is an evaluation error, which matches (fail closed).
const evalCostLimit = 1_000_000

// Gate is one compiled gate of config.
type Gate struct {
	Name          string
	When          string
	Roles         []string
	Quorum        int
	DistinctRoles bool
	Expiry        time.Duration
	OnRefusal     string
	Tenants       []string

	program cel.Program // full evaluation
	partial cel.Program // with tool.input unknown, for CouldMatch
	tests   []stringTest
}

// Gates are the compiled gates of config, in config order: the first that
// matches a call decides who must approve it.
type Gates struct {
	gates []*Gate
}

// Input is what a condition sees: tool.name and tool.input, trajectory.id,
// .tenant, .stage and .budget_used, request.provider and .model. The model's
// own description of the call is deliberately absent. From the name and
// input come tool.class, tool.command, tool.path and tool.url (Classify):
// strings, "" when they do not apply; the last three are unset when the
// input of a tool that takes JSON is not JSON.
type Input struct {
	ToolName   string
	ToolInput  any // parsed JSON: maps, slices, strings, float64, bool, nil
	Tenant     string
	Trajectory string
	Stage      string
	BudgetUsed float64
	Provider   string
	Model      string
}

func (in Input) vars(withInput bool) map[string]any {
	tool := map[string]any{"name": in.ToolName}
	if withInput {
		input := in.ToolInput
		if input == nil {
			input = map[string]any{}
		}
		c := Classify(in.ToolName, input)
		tool["input"], tool["class"] = input, c.Name
		if _, text := input.(string); !text || FreeText(in.ToolName) {
			// Input that is not JSON, of a tool whose input should be,
			// leaves these unset: reading them fails, and holds the call.
			tool["command"], tool["path"], tool["url"] = c.Command, c.Path, c.URL
		}
	} else if c := ClassOfName(in.ToolName); c != "" {
		tool["class"] = c // known by its name; otherwise its input may make it a shell
	}
	return map[string]any{
		"tool": tool,
		"trajectory": map[string]any{
			"id":          in.Trajectory,
			"tenant":      in.Tenant,
			"stage":       in.Stage,
			"budget_used": in.BudgetUsed,
		},
		"request": map[string]any{
			"provider": in.Provider,
			"model":    in.Model,
		},
	}
}

// newEnv declares the variables of a condition and CEL's string
// extensions (lowerAscii, split, join, trim, ...), at a fixed version so
// that an upgrade of CEL never changes what a condition means.
func newEnv() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("tool", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("trajectory", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("request", cel.MapType(cel.StringType, cel.StringType)),
		ext.Strings(ext.StringsVersion(5)),
	)
}

// Compile compiles and type-checks every gate's condition. It returns every
// problem in one error, each naming the gate and, for a CEL error, its
// line:column in the condition.
func Compile(gates []config.Gate) (*Gates, error) {
	env, err := newEnv()
	if err != nil {
		return nil, fmt.Errorf("approvals: CEL environment: %w", err)
	}
	var problems []string
	out := &Gates{}
	for i, cg := range gates {
		where := fmt.Sprintf("gates[%d] (%s): when", i, cg.Name)
		g, errs := compileGate(env, cg)
		for _, e := range errs {
			problems = append(problems, where+": "+e)
		}
		if len(errs) == 0 {
			out.gates = append(out.gates, g)
		}
	}
	if len(problems) > 0 {
		return nil, &CompileError{Problems: problems}
	}
	return out, nil
}

// CompileError lists every problem Compile found.
type CompileError struct {
	Problems []string
}

func (e *CompileError) Error() string {
	return "approvals: bad gates:\n  " + strings.Join(e.Problems, "\n  ")
}

func compileGate(env *cel.Env, cg config.Gate) (*Gate, []string) {
	if strings.TrimSpace(cg.When) == "" {
		return nil, []string{"empty condition"}
	}
	ast, iss := env.Compile(cg.When)
	if iss.Err() != nil {
		var errs []string
		for _, e := range iss.Errors() {
			errs = append(errs, fmt.Sprintf("%d:%d: %s", e.Location.Line(), e.Location.Column()+1, e.Message))
		}
		return nil, errs
	}
	if t := ast.OutputType(); !t.IsExactType(types.BoolType) {
		return nil, []string{fmt.Sprintf("1:1: the condition is of type %s, want bool (compare explicitly, e.g. tool.input.force == true)", t)}
	}
	program, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize), cel.CostLimit(evalCostLimit))
	if err != nil {
		return nil, []string{err.Error()}
	}
	partial, err := env.Program(ast, cel.EvalOptions(cel.OptPartialEval), cel.CostLimit(evalCostLimit))
	if err != nil {
		return nil, []string{err.Error()}
	}
	expiry := cg.Expiry.Std()
	if expiry <= 0 {
		expiry = config.DefaultGateExpiry
	}
	onRefusal := cg.OnRefusal
	if onRefusal == "" {
		onRefusal = config.OnRefusalContinue
	}
	return &Gate{
		Name:          cg.Name,
		When:          cg.When,
		Roles:         slices.Clone(cg.Approvers.Roles),
		Quorum:        max(cg.Approvers.Quorum, 1),
		DistinctRoles: cg.Approvers.DistinctRoles,
		Expiry:        expiry,
		OnRefusal:     onRefusal,
		Tenants:       slices.Clone(cg.Tenants),
		program:       program,
		partial:       partial,
		tests:         stringTests(env, ast),
	}, nil
}

// Empty reports whether there are no gates: nothing is ever held.
func (g *Gates) Empty() bool { return g == nil || len(g.gates) == 0 }

// List returns the compiled gates in config order.
func (g *Gates) List() []*Gate {
	if g == nil {
		return nil
	}
	return slices.Clone(g.gates)
}

// Lookup returns the gate named name.
func (g *Gates) Lookup(name string) (*Gate, bool) {
	if g == nil {
		return nil, false
	}
	for _, gate := range g.gates {
		if gate.Name == name {
			return gate, true
		}
	}
	return nil, false
}

// ForTenant reports whether some gate applies to tenant at all.
func (g *Gates) ForTenant(tenant string) bool {
	if g == nil {
		return false
	}
	for _, gate := range g.gates {
		if gate.applies(tenant) {
			return true
		}
	}
	return false
}

func (gate *Gate) applies(tenant string) bool {
	return len(gate.Tenants) == 0 || slices.Contains(gate.Tenants, tenant)
}

// CouldMatch reports whether some gate of tenant could match a call to
// toolName whatever its input: it evaluates each condition with tool.input
// unknown and is false only when every result is definitely false. The
// tenant and tool name given override in's.
func (g *Gates) CouldMatch(tenant, toolName string, in Input) bool {
	return g.FirstCouldMatch(tenant, toolName, in) != nil
}

// FirstCouldMatch is the first gate of tenant that could match a call to
// toolName whatever its input (as CouldMatch judges), nil when none: the
// gate that holds a call whose input cannot be read one way.
func (g *Gates) FirstCouldMatch(tenant, toolName string, in Input) *Gate {
	if g == nil {
		return nil
	}
	in.Tenant, in.ToolName = tenant, toolName
	var vars cel.PartialActivation // the same for every gate: built once, at the first that applies
	for _, gate := range g.gates {
		if !gate.applies(tenant) {
			continue
		}
		if vars == nil {
			var err error
			v := in.vars(false)
			unknown := []*cel.AttributePatternType{
				cel.AttributePattern("tool").QualString("input"), cel.AttributePattern("tool").QualString("command"),
				cel.AttributePattern("tool").QualString("path"), cel.AttributePattern("tool").QualString("url"),
			}
			if _, known := v["tool"].(map[string]any)["class"]; !known {
				unknown = append(unknown, cel.AttributePattern("tool").QualString("class"))
			}
			if vars, err = cel.PartialVars(v, unknown...); err != nil {
				return gate
			}
		}
		out, _, err := gate.partial.Eval(vars)
		if err != nil || out == nil {
			return gate
		}
		if b, ok := out.Value().(bool); !ok || b || types.IsUnknown(out) {
			return gate
		}
	}
	return nil
}

// Match returns the first gate of in.Tenant that matches in, with why: its
// condition, or the evaluation error. An evaluation error is a match (fail
// closed): a call whose input a condition cannot judge is held for a
// person. It returns nil when no gate matches.
func (g *Gates) Match(in Input) (gate *Gate, why string) {
	if g == nil {
		return nil, ""
	}
	vars := in.vars(true)
	for _, gate := range g.gates {
		if !gate.applies(in.Tenant) {
			continue
		}
		if matched, why := gate.eval(vars); matched {
			return gate, why
		}
	}
	return nil, ""
}

// eval evaluates the gate's condition: whether it holds the call, and why
// (the condition, or the evaluation error that holds it to be safe).
func (gate *Gate) eval(vars map[string]any) (matched bool, why string) {
	out, _, err := gate.program.Eval(vars)
	if err != nil {
		return true, "evaluation error (held to be safe): " + err.Error()
	}
	b, ok := out.Value().(bool)
	if !ok {
		return true, fmt.Sprintf("evaluation error (held to be safe): result is %v", out.Type())
	}
	if b {
		return true, gate.When
	}
	return false, ""
}

// Verdict is what one gate makes of a call (see Explain).
type Verdict struct {
	Gate string `json:"gate"`
	// Applies is false when the gate is for other tenants only.
	Applies bool `json:"applies"`
	// Matches says the condition holds the call: it is true, or it could
	// not be evaluated (Why says so).
	Matches bool   `json:"matches"`
	Why     string `json:"why,omitempty"`
	// Decides marks the first gate that matches: it holds the call, and
	// its approvers decide.
	Decides bool    `json:"decides"`
	Matched []Match `json:"matched,omitempty"`
}

// Explain evaluates every gate on in, in config order, as Match does, and
// says what each made of it: a way to test a gate's condition on sample
// calls before a model makes them.
func (g *Gates) Explain(in Input) []Verdict {
	if g == nil {
		return nil
	}
	vars := in.vars(true)
	out := make([]Verdict, 0, len(g.gates))
	decided := false
	for _, gate := range g.gates {
		v := Verdict{Gate: gate.Name, Applies: gate.applies(in.Tenant)}
		if v.Applies {
			v.Matches, v.Why = gate.eval(vars)
		}
		if v.Matches {
			v.Matched = gate.matches(in)
			v.Decides, decided = !decided, true
		}
		out = append(out, v)
	}
	return out
}

// Request returns a new pending approval request for call under gate at now,
// with the gate's approvers and expiry copied in, so a change of config
// never changes who decides a request already open. Its preview, matched
// parts and count of invisible characters are what approvers are shown.
func (gate *Gate) Request(id string, call Call, why string, now time.Time) *Request {
	in := Input{ToolName: call.Name}
	if v, err := call.Value(); err == nil {
		in.ToolInput = v
	}
	return &Request{
		ID:            id,
		Call:          call,
		Digest:        call.Digest(),
		Gate:          gate.Name,
		Why:           why,
		Preview:       Preview(call),
		Matched:       gate.matches(in),
		Invisible:     CountInvisible(call.Name) + CountInvisible(string(call.Input)),
		Roles:         slices.Clone(gate.Roles),
		Quorum:        gate.Quorum,
		DistinctRoles: gate.DistinctRoles,
		OnRefusal:     gate.OnRefusal,
		CreatedAt:     now,
		ExpiresAt:     now.Add(gate.Expiry),
		State:         Pending,
	}
}
