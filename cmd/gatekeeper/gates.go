package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"gatekeeper/approvals"
)

const gatesUsage = `usage: gatekeeper gates test [-config config.yaml] [flags] < calls.json

Reads tool calls from stdin, each a JSON object {"name": ..., "input": ...}
("input" the arguments as an object, or as a string holding their JSON, as
the OpenAI APIs send them), one after the other, and prints for each what
every gate of the config makes of it: whether it matches, the part of the
call its condition matched, and which gate holds the call.

  -tenant T        the call's tenant (gates limited to other tenants do not apply)
  -trajectory ID   trajectory.id          -stage S       trajectory.stage
  -budget-used F   trajectory.budget_used -provider P    request.provider
  -model M         request.model          -json          print JSON
`

// maxGateTestInput bounds what gates test reads from stdin.
const maxGateTestInput = 32 << 20

func runGates(args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "test" {
		fmt.Fprint(stderr, gatesUsage)
		return flag.ErrHelp
	}
	fs := flag.NewFlagSet("gates test", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, gatesUsage) }
	path := fs.String("config", "config.yaml", "config file")
	var in approvals.Input
	fs.StringVar(&in.Tenant, "tenant", "", "the call's tenant")
	fs.StringVar(&in.Trajectory, "trajectory", "run-1", "trajectory.id")
	fs.StringVar(&in.Stage, "stage", "nominal", "trajectory.stage")
	fs.Float64Var(&in.BudgetUsed, "budget-used", 0, "trajectory.budget_used")
	fs.StringVar(&in.Provider, "provider", "anthropic", "request.provider")
	fs.StringVar(&in.Model, "model", "", "request.model")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return errors.New("gates test reads the calls from stdin; it takes no arguments")
	}
	cfg, err := loadConfig(*path, getenv, stderr)
	if err != nil {
		return err
	}
	gates, err := approvals.Compile(cfg.Gates)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(stdin, maxGateTestInput+1))
	if err != nil {
		return err
	}
	if len(data) > maxGateTestInput {
		return fmt.Errorf("stdin holds more than %d bytes of calls", maxGateTestInput)
	}
	calls, err := parseTestCalls(data)
	if err != nil {
		return err
	}
	if len(calls) == 0 {
		return errors.New("no call on stdin: write one or more {\"name\": ..., \"input\": {...}}")
	}
	results := make([]gateTestResult, len(calls))
	for i, c := range calls {
		results[i] = testCall(gates, in, c)
	}
	if *asJSON {
		return printJSON(stdout, results)
	}
	for i, r := range results {
		printGateTest(stdout, i+1, r)
	}
	return nil
}

// testCallInput is one call on stdin.
type testCallInput struct {
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// parseTestCalls reads a sequence of JSON calls. A call's input is an
// object, absent (no arguments), or a string holding the arguments' JSON.
func parseTestCalls(data []byte) ([]testCallInput, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var out []testCallInput
	for n := 1; ; n++ {
		var c testCallInput
		err := dec.Decode(&c)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("call %d: want {\"name\": ..., \"input\": ...}: %w", n, err)
		}
		if c.Name == "" {
			return nil, fmt.Errorf("call %d: no name", n)
		}
		if trimmed := bytes.TrimSpace(c.Input); len(trimmed) > 0 && trimmed[0] == '"' {
			var args string
			if err := json.Unmarshal(trimmed, &args); err != nil {
				return nil, fmt.Errorf("call %d: input: %w", n, err)
			}
			c.Input = json.RawMessage(args)
		}
		out = append(out, c)
	}
}

// gateTestResult is what the gates make of one call.
type gateTestResult struct {
	Call approvals.Call `json:"call"`
	// Class is what the call is taken to do (tool.class, tool.command,
	// tool.path, tool.url as a condition sees them).
	Class    classJSON           `json:"class"`
	Verdicts []approvals.Verdict `json:"gates"`
	HeldBy   string              `json:"held_by,omitempty"` // the gate that holds the call; empty: not held
}

// testCall judges c as the proxy does: a call whose arguments are not
// canonical JSON is judged on their raw text, which holds it wherever a
// condition reads tool.input (fail closed).
func testCall(gates *approvals.Gates, in approvals.Input, c testCallInput) gateTestResult {
	call, err := approvals.Canonical(c.Name, c.Input)
	in.ToolName = c.Name
	if err == nil {
		in.ToolInput, err = call.Value()
	}
	if err != nil {
		raw, _ := json.Marshal(string(c.Input)) // a string always marshals
		call = approvals.Call{Name: c.Name, Input: raw}
		in.ToolInput = string(c.Input)
	}
	class := approvals.Classify(in.ToolName, in.ToolInput)
	r := gateTestResult{Call: call, Class: classJSON{class.Name, class.Command, class.Path, class.URL}, Verdicts: gates.Explain(in)}
	for _, v := range r.Verdicts {
		if v.Decides {
			r.HeldBy = v.Gate
		}
	}
	return r
}

// classJSON is approvals.Class as `gates test -json` prints it.
type classJSON struct {
	Name    string `json:"name"`
	Command string `json:"command,omitempty"`
	Path    string `json:"path,omitempty"`
	URL     string `json:"url,omitempty"`
}

func printGateTest(w io.Writer, n int, r gateTestResult) {
	fmt.Fprintf(w, "call %d: %s\n", n, approvals.Preview(r.Call))
	switch c := r.Class; {
	case c.Name == "":
		fmt.Fprintln(w, "  class: none (tool.class is \"\")")
	case c.Command != "":
		fmt.Fprintf(w, "  class: %s, command: %s\n", c.Name, approvals.Excerpt(c.Command, 200, nil))
	case c.Path != "":
		fmt.Fprintf(w, "  class: %s, path: %s\n", c.Name, approvals.Excerpt(c.Path, 200, nil))
	case c.URL != "":
		fmt.Fprintf(w, "  class: %s, url: %s\n", c.Name, approvals.Excerpt(c.URL, 200, nil))
	default:
		fmt.Fprintf(w, "  class: %s\n", c.Name)
	}
	for _, v := range r.Verdicts {
		var what string
		switch {
		case !v.Applies:
			what = "does not apply (for other tenants; see -tenant)"
		case !v.Matches:
			what = "no match"
		case v.Decides:
			what = "MATCHES: holds the call"
		default:
			what = "matches, but an earlier gate holds the call"
		}
		fmt.Fprintf(w, "  gate %s: %s\n", approvals.Visible(v.Gate), what)
		if v.Matches && strings.HasPrefix(v.Why, "evaluation error") {
			fmt.Fprintf(w, "    %s\n", approvals.Visible(v.Why))
		}
		for _, m := range v.Matched {
			fmt.Fprintf(w, "    matched %s at character %d of %d: %s⟦%s⟧%s\n", m.Where, m.At, m.Of, m.Before, m.Text, m.After)
		}
	}
	if r.HeldBy == "" {
		fmt.Fprintln(w, "  → not held")
		return
	}
	fmt.Fprintf(w, "  → held by %s\n", approvals.Visible(r.HeldBy))
}
