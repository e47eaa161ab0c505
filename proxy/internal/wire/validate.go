package wire

import (
	"fmt"
	"strconv"

	"github.com/tidwall/gjson"

	"gatekeeper/proxy/internal/apierr"
	"gatekeeper/proxy/internal/dialect"
	"gatekeeper/streaming"
)

// The members of a turn request gatekeeper's decisions depend on. A
// provider's lenient decoder may read "true" or 1 as a boolean, or "4096"
// as a number, where gatekeeper would read no value at all: such a request
// would be metered as another request than the one the provider serves, so
// each must have its JSON type (or be null, which both read as absent).
var (
	booleanMembers = []string{"stream", "background"}
	integerMembers = []string{"max_tokens", "max_output_tokens", "max_completion_tokens"}
	stringMembers  = []string{"model"}
)

// CheckTurnBody refuses a turn request whose decision members have the
// wrong JSON type, or whose top level names a member twice (gatekeeper and
// the provider might each read another of the two). body is a valid JSON
// object (the dialect's ParseRequest checked it). A request with background: true
// is refused where api has background responses unless allowBackground
// (its output could be fetched): its reply would come later, through a
// retrieval that no turn meters.
func CheckTurnBody(api streaming.API, body []byte, allowBackground bool) error {
	refuseBackground := dialect.Of(api).Background && !allowBackground
	seen := make(map[string]struct{}, 16)
	var err error
	gjson.ParseBytes(body).ForEach(func(key, value gjson.Result) bool {
		name := key.String() // unescaped, as the provider reads it
		if _, dup := seen[name]; dup {
			err = apierr.BadRequest(fmt.Sprintf("the request names the member %s more than once; send it once", strconv.Quote(name)))
			return false
		}
		seen[name] = struct{}{}
		if value.Type == gjson.Null {
			return true
		}
		err = checkMember(name, value, refuseBackground)
		return err == nil
	})
	if err != nil {
		return err
	}
	return checkGenerationConfig(body)
}

// The Gemini API's output limit is nested, and its JSON takes each
// member in lowerCamelCase or snake_case: a limit gatekeeper reads must
// be the one Google applies, so it is an integer, and the config is
// named one way only.
var generationConfigs = [...]string{"generationConfig", "generation_config"}

func checkGenerationConfig(body []byte) error {
	seen := ""
	for _, name := range generationConfigs {
		cfg := gjson.GetBytes(body, name)
		if !cfg.Exists() {
			continue
		}
		if seen != "" {
			return apierr.BadRequest(fmt.Sprintf("the request names both %s and %s; send one", seen, name))
		}
		seen = name
		for _, m := range [...]string{"maxOutputTokens", "max_output_tokens"} {
			if v := cfg.Get(m); v.Exists() && v.Type != gjson.Null && !isInteger(v) {
				return apierr.BadRequest(fmt.Sprintf("%s.%s must be a JSON integer, not %s", name, m, v.Raw))
			}
		}
	}
	return nil
}

func checkMember(name string, v gjson.Result, refuseBackground bool) error {
	for _, m := range booleanMembers {
		if name == m && v.Type != gjson.True && v.Type != gjson.False {
			return apierr.BadRequest(fmt.Sprintf("%s must be a JSON boolean (true or false), not %s", name, v.Raw))
		}
	}
	for _, m := range integerMembers {
		if name == m && !isInteger(v) {
			return apierr.BadRequest(fmt.Sprintf("%s must be a JSON integer, not %s", name, v.Raw))
		}
	}
	for _, m := range stringMembers {
		if name == m && v.Type != gjson.String {
			return apierr.BadRequest(fmt.Sprintf("%s must be a JSON string", name))
		}
	}
	if name == "background" && v.Type == gjson.True && refuseBackground {
		return apierr.BadRequest("background responses are refused: their output is fetched later through GET /v1/responses/{id}, " +
			"which gatekeeper neither meters nor gates; send the request without background, or ask an operator to allow " +
			"that path in providers[].passthrough")
	}
	return nil
}

// isInteger reports whether v is a JSON number written as an integer
// (digits, an optional minus) that fits in an int64.
func isInteger(v gjson.Result) bool {
	if v.Type != gjson.Number {
		return false
	}
	_, err := strconv.ParseInt(v.Raw, 10, 64)
	return err == nil
}

// CheckHostedMCP refuses a Responses request that declares a hosted MCP
// tool whose calls need no approval (require_approval "never", or a
// "never" list of tools), in its tools or in an additional_tools input
// item: the provider calls such a server itself, between the model's
// steps, so no approval gate ever sees the call. Every member of a tool is
// read, so that a duplicated one cannot hide the setting.
func CheckHostedMCP(body []byte) error {
	root := gjson.ParseBytes(body)
	lists := []gjson.Result{root.Get("tools")}
	root.Get("input").ForEach(func(_, item gjson.Result) bool {
		if item.Get("type").String() == "additional_tools" {
			lists = append(lists, item.Get("tools"))
		}
		return true
	})
	for _, tools := range lists {
		if err := checkMCPTools(tools); err != nil {
			return err
		}
	}
	return nil
}

func checkMCPTools(tools gjson.Result) error {
	var err error
	tools.ForEach(func(_, tool gjson.Result) bool {
		mcp, never := false, false
		tool.ForEach(func(k, v gjson.Result) bool {
			switch k.String() {
			case "type":
				mcp = mcp || v.String() == "mcp"
			case "require_approval":
				never = never || v.Type == gjson.String && v.Str == "never" || v.IsObject() && v.Get("never").Exists()
			}
			return true
		})
		if mcp && never {
			err = apierr.BadRequest(`hosted MCP tools with require_approval "never" are refused for this tenant ` +
				`(tenants[].refuse_ungated_mcp): the provider calls them itself, where no approval gate can hold the call; ` +
				`declare the tool with require_approval "always", or leave it out`)
			return false
		}
		return true
	})
	return err
}
