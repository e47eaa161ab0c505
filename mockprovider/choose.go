package mockprovider

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// directive finds "mock:<name>" in user text; names use the characters
// allowed for script turn names.
var directive = regexp.MustCompile(`mock:([A-Za-z0-9_-]+)`)

// chooseTurn applies the documented order: header, directive, rules,
// default.
func (s *Server) chooseTurn(h http.Header, req *turnRequest) (string, TurnSpec, error) {
	if v := strings.TrimSpace(h.Get(HeaderTurn)); v != "" {
		spec, name, err := s.headerTurn(v)
		if err != nil || !spec.FirstOnly || req.toolResults == 0 {
			return name, spec, err
		}
	}
	for _, m := range directive.FindAllStringSubmatch(req.lastUserText, -1) {
		if spec, ok := s.namedTurn(m[1]); ok {
			return m[1], spec, nil
		}
		s.log.Warn("mock directive names no turn", "name", m[1])
	}
	for i, rule := range s.script.Rules {
		if !rule.When.matches(req) {
			continue
		}
		if rule.Turn.Spec != nil {
			return fmt.Sprintf("rules[%d]", i), *rule.Turn.Spec, nil
		}
		if spec, ok := s.namedTurn(rule.Turn.Name); ok {
			return rule.Turn.Name, spec, nil
		}
	}
	if req.toolResults > 0 {
		return "default_tool_results", TurnSpec{Kind: KindText}, nil
	}
	return "default", TurnSpec{Kind: KindText}, nil
}

// headerTurn reads an X-Mock-Turn value: a spec as JSON or a turn name.
func (s *Server) headerTurn(v string) (TurnSpec, string, error) {
	if strings.HasPrefix(v, "{") {
		spec, err := parseSpecJSON(v)
		return spec, "header", err
	}
	if spec, ok := s.namedTurn(v); ok {
		return spec, v, nil
	}
	return TurnSpec{}, "", &ScriptError{Field: HeaderTurn, Msg: fmt.Sprintf("no turn named %q", v)}
}

func (s *Server) namedTurn(name string) (TurnSpec, bool) {
	if spec, ok := s.script.Turns[name]; ok {
		return spec, true
	}
	return builtinTurn(name)
}

func (m Match) matches(req *turnRequest) bool {
	switch m.API {
	case "":
	case "openai":
		if req.api != APIChat && req.api != APIResponses {
			return false
		}
	default:
		if API(m.API) != req.api {
			return false
		}
	}
	if m.LastUserContains != "" && !strings.Contains(req.lastUserText, m.LastUserContains) {
		return false
	}
	if m.HasToolResults != nil && *m.HasToolResults != (req.toolResults > 0) {
		return false
	}
	if m.DeclaresTool != "" {
		if _, ok := findTool(req.tools, m.DeclaresTool); !ok {
			return false
		}
	}
	if m.Model != "" {
		if prefix, ok := strings.CutSuffix(m.Model, "*"); ok {
			if !strings.HasPrefix(req.model, prefix) {
				return false
			}
		} else if m.Model != req.model {
			return false
		}
	}
	return true
}
