package admit

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"gatekeeper/streaming"
)

func TestHiddenInput(t *testing.T) {
	for _, c := range []struct {
		name, body string
		hidden     bool
	}{
		{"plain text", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, false},
		{"Anthropic document by file id", `{"messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"file_1"}}]}]}`, true},
		{"Anthropic image by URL", `{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]}]}`, true},
		{"Anthropic document by URL in a tool result", `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"document","source":{"type":"url","url":"https://example.com/a.pdf"}}]}]}]}`, true},
		{"Anthropic image inline", `{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBOR"}}]}]}`, false},
		{"Anthropic container upload", `{"messages":[{"role":"user","content":[{"type":"container_upload","file_id":"file_2"}]}]}`, true},
		{"Chat file by id", `{"messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-3"}}]}]}`, true},
		{"Chat file inline", `{"messages":[{"role":"user","content":[{"type":"file","file":{"file_data":"data:application/pdf;base64,JVBER","filename":"a.pdf"}}]}]}`, false},
		{"Chat image by URL", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/b.png"}}]}]}`, true},
		{"Chat image inline", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBOR"}}]}]}`, false},
		{"Responses file by id", `{"input":[{"role":"user","content":[{"type":"input_file","file_id":"file-4"}]}]}`, true},
		{"Responses file by URL", `{"input":[{"role":"user","content":[{"type":"input_file","file_url":"https://example.com/c.pdf"}]}]}`, true},
		{"Responses image by id", `{"input":[{"role":"user","content":[{"type":"input_image","file_id":"file-5"}]}]}`, true},
		{"Responses image inline", `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/png;base64,iVBOR"}]}]}`, false},
		{"Responses previous_response_id", `{"previous_response_id":"resp_1","input":"go on"}`, true},
		{"Responses conversation", `{"conversation":"conv_1","input":"go on"}`, true},
		{"Responses conversation null", `{"conversation":null,"input":"go on"}`, false},
		{"Gemini fileData", `{"contents":[{"role":"user","parts":[{"fileData":{"fileUri":"https://example.com/d.pdf","mimeType":"application/pdf"}}]}]}`, true},
		{"a tool's url parameter", `{"tools":[{"name":"WebFetch","input_schema":{"properties":{"url":{"type":"string"},"source":{"type":"object","properties":{"type":{"type":"string"}}}}}}],"messages":[{"role":"user","content":"hi"}]}`, false},
		{"Anthropic image by URL, spaced", `{"messages":[{"role":"user","content":[{"type":"image","source":{"type" : "url", "url" :  "https://example.com/a.png"}}]}]}`, true},
		{"Chat file by id, its name escaped", `{"messages":[{"role":"user","content":[{"type":"file","file":{"file\u005fid":"file-3"}}]}]}`, true},
		{"Responses previous_response_id escaped", `{"previous\u005fresponse_id":"resp_1","input":"go on"}`, true},
		{"the words in text", `{"messages":[{"role":"user","content":"what is a \"file_id\" or a \"source\"?"}]}`, false},
	} {
		if got := HiddenInput(apiOfCase(c.name), []byte(c.body)); got != c.hidden {
			t.Errorf("%s: HiddenInput = %v, want %v", c.name, got, c.hidden)
		}
	}
}

// apiOfCase is the API a case's name begins with (Anthropic otherwise).
func apiOfCase(name string) streaming.API {
	switch {
	case strings.HasPrefix(name, "Chat"):
		return streaming.APIChat
	case strings.HasPrefix(name, "Responses"):
		return streaming.APIResponses
	case strings.HasPrefix(name, "Gemini"):
		return streaming.APIGemini
	}
	return streaming.APIAnthropic
}

func FuzzHiddenInput(f *testing.F) {
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"file_1"}}]}]}`))
	f.Add([]byte(`{"input":[{"type":"input_file","file_url":"https://x"}],"previous_response_id":"r"}`))
	f.Add([]byte(`{"messages":[[[[[[[[[[[[[[[[{"source":{"type":"url"}}]]]]]]]]]]]]]]]]}`))
	// Any bytes are judged without a panic, and how a JSON body is laid out
	// changes nothing: indented, it references the same content.
	apis := []streaming.API{streaming.APIAnthropic, streaming.APIChat, streaming.APIResponses, streaming.APIGemini}
	f.Fuzz(func(t *testing.T, body []byte) {
		api := apis[len(body)%len(apis)]
		got := HiddenInput(api, body)
		var indented bytes.Buffer
		if json.Valid(body) && json.Indent(&indented, body, "", "  ") == nil {
			if again := HiddenInput(api, indented.Bytes()); again != got {
				t.Fatalf("HiddenInput %v, indented %v: %s", got, again, body)
			}
		}
	})
}
