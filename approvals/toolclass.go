package approvals

import "strings"

// Tool classes: what a call does, whatever the agent calls its tool. A
// gate can say tool.class == "shell" and read the command at
// tool.command, for Claude Code's Bash, Codex's shell or exec_command,
// Gemini CLI's run_shell_command alike.
const (
	ClassShell     = "shell"      // runs a command: tool.command
	ClassFileWrite = "file_write" // writes or edits a file: tool.path when the input names one
	ClassFileRead  = "file_read"  // reads a file or lists a directory
	ClassWebFetch  = "web_fetch"  // fetches a URL: tool.url when the input names one
	ClassWebSearch = "web_search" // searches the web
	ClassMCP       = "mcp"        // a tool of an MCP server, named mcp__server__tool
)

// toolClasses are the tools of the agents gatekeeper is tried with, by
// their names in lower case (names are matched without regard to ASCII
// case, as the shipped gate always matched "bash").
var toolClasses = map[string]string{
	// Claude Code and the Claude Agent SDK.
	"bash": ClassShell, "write": ClassFileWrite, "edit": ClassFileWrite, "multiedit": ClassFileWrite,
	"notebookedit": ClassFileWrite, "read": ClassFileRead, "glob": ClassFileRead, "grep": ClassFileRead,
	"ls": ClassFileRead, "webfetch": ClassWebFetch, "websearch": ClassWebSearch,
	// Codex: shell (command as an array), shell_command, exec_command
	// (cmd) and write_stdin (chars) of its unified exec, local_shell (an
	// action with the command array), exec (code mode's custom tool, free
	// text), apply_patch (free text, or {input}).
	"shell": ClassShell, "shell_command": ClassShell, "exec_command": ClassShell, "write_stdin": ClassShell,
	"local_shell": ClassShell, "local_shell_call": ClassShell, "exec": ClassShell, "apply_patch": ClassFileWrite,
	"web_search": ClassWebSearch,
	// opencode (bash, write, edit, read, ls, grep, glob above).
	"patch": ClassFileWrite, "list": ClassFileRead,
	// Gemini CLI and Qwen Code.
	"run_shell_command": ClassShell, "write_file": ClassFileWrite, "replace": ClassFileWrite,
	"read_file": ClassFileRead, "read_many_files": ClassFileRead, "list_directory": ClassFileRead,
	"search_file_content": ClassFileRead, "web_fetch": ClassWebFetch, "google_web_search": ClassWebSearch,
	// Names other agents and SDK apps commonly give theirs.
	"run_command": ClassShell, "execute_command": ClassShell, "run_terminal_cmd": ClassShell, "terminal": ClassShell,
	"create_file": ClassFileWrite, "edit_file": ClassFileWrite, "str_replace_editor": ClassFileWrite,
	"str_replace_based_edit_tool": ClassFileWrite, "fetch": ClassWebFetch,
}

// Class is what a call is taken to do (see Classify).
type Class struct {
	// Name is one of the Class* constants, "" when the call is none of them.
	Name string
	// Command is a shell call's command line: its command (or cmd, or the
	// chars it writes to a running shell) as a string, or its command array
	// joined by spaces. "" for other classes.
	Command string
	// Path is the file a file_write or file_read call names, URL the URL a
	// web_fetch call names; "" when the input names none.
	Path, URL string
}

// Classify says what a call to name with input (parsed JSON, or the raw
// text of a free-text input) does. A known tool is classed by its name;
// another whose input carries a command (a string command or cmd, or a
// command array of strings) is a shell: an SDK app's shell tool is most
// often shaped so, and a gate on shells had better hold too many calls
// than one too few. An MCP tool is named mcp__server__tool.
func Classify(name string, input any) Class {
	c := Class{Name: ClassOfName(name)}
	obj, _ := input.(map[string]any)
	if c.Name == "" && commandOf(obj) != "" {
		c.Name = ClassShell
	}
	switch c.Name {
	case ClassShell:
		c.Command = commandOf(obj)
		if c.Command == "" {
			if s, ok := input.(string); ok && FreeText(name) {
				c.Command = s // code mode's exec: its text is what runs
			} else if s, ok := obj["chars"].(string); ok {
				c.Command = s // write_stdin: what is typed into a running shell
			}
		}
	case ClassFileWrite, ClassFileRead:
		c.Path = firstString(obj, "file_path", "filePath", "path", "notebook_path", "absolute_path")
	case ClassWebFetch:
		c.URL = firstString(obj, "url", "uri")
	}
	return c
}

// freeText are the tools whose input is text, not JSON (Codex's custom
// tools).
var freeText = map[string]bool{"exec": true, "apply_patch": true}

// FreeText reports whether a tool's input is text by design. Another
// tool's input that is not JSON cannot be read: a condition that reads
// tool.command, tool.path or tool.url on it fails to evaluate, which holds
// the call (gates fail closed).
func FreeText(name string) bool { return freeText[strings.ToLower(name)] }

// ClassOfName is the class of a tool by its name alone, "" when the name
// is not known (its input may still make it a shell: Classify).
func ClassOfName(name string) string {
	lower := strings.ToLower(name)
	if c, ok := toolClasses[lower]; ok {
		return c
	}
	if strings.HasPrefix(lower, "mcp__") {
		return ClassMCP
	}
	return ""
}

// commandOf is the command line an input carries: a string command or
// cmd, or a command array of strings joined by spaces (Codex's shell and
// local_shell action).
func commandOf(obj map[string]any) string {
	if obj == nil {
		return ""
	}
	if s := firstString(obj, "command", "cmd"); s != "" {
		return s
	}
	if arr, ok := obj["command"].([]any); ok && len(arr) > 0 {
		parts := make([]string, 0, len(arr))
		for _, v := range arr {
			s, ok := v.(string)
			if !ok {
				return ""
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, " ")
	}
	return ""
}

func firstString(obj map[string]any, keys ...string) string {
	for _, k := range keys {
		if s, ok := obj[k].(string); ok && s != "" {
			return s
		}
	}
	return ""
}
