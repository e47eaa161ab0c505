package mockprovider

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"gatekeeper/internal/streamtest"
	"gatekeeper/streaming"
	"gatekeeper/streaming/gemini"
)

const geminiBody = `{"contents":[{"role":"user","parts":[{"text":"list the files"}]}],
"tools":[{"functionDeclarations":[{"name":"run_shell_command","parametersJsonSchema":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}}]}]}`

func geminiPost(t *testing.T, url, body string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// TestGemini: the mock answers the Gemini API as Google does, read back
// with gatekeeper's own Gemini decoders.
func TestGemini(t *testing.T) {
	_, url := newMock(t, Options{Keys: []string{"goog-key"}})
	d := gemini.Dialect{}
	stream := url + "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"

	resp, b := geminiPost(t, stream, geminiBody, "x-goog-api-key", "goog-key")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || !bytes.Contains(b, []byte("\r\n\r\n")) {
		t.Fatalf("%d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	res := streamtest.MustDecode(t, d, b)
	if res.StopReason() != streaming.StopEndTurn || res.TextBytes == 0 || !res.UsageSeen || res.Model != "gemini-2.5-flash" || res.Truncated {
		t.Fatalf("text turn: %+v", res)
	}

	resp, b = geminiPost(t, stream+"&key=goog-key", geminiBody, HeaderTurn, `{"kind":"tool","tools":[{"name":"run_shell_command"}]}`)
	res = streamtest.MustDecode(t, d, b)
	if resp.StatusCode != 200 || res.StopReason() != streaming.StopToolUse || len(res.ToolCalls) != 1 ||
		gjson.Get(string(res.ToolCalls[0].Arguments), "command").Type != gjson.String {
		t.Fatalf("tool turn: %d %+v\n%s", resp.StatusCode, res, b)
	}
	if bytes.Contains(b, []byte(`"id"`)) {
		t.Error("the mock's Gemini call carries an id, which Google's do not")
	}

	// Not streamed: one body.
	resp, b = geminiPost(t, url+"/v1beta/models/gemini-2.5-pro:generateContent", geminiBody, "x-goog-api-key", "goog-key",
		HeaderTurn, `{"kind":"tool","tools":[{"name":"run_shell_command"}]}`)
	whole, err := d.DecodeJSON(b)
	if err != nil || resp.StatusCode != 200 || len(whole.ToolCalls) != 1 || whole.StopReason() != streaming.StopToolUse {
		t.Fatalf("body: %d %+v %v\n%s", resp.StatusCode, whole, err, b)
	}

	// Errors in Google's format.
	for _, tc := range []struct {
		name, url, body, key, turn string
		status                     int
		gstatus                    string
	}{
		{"bad key", stream, geminiBody, "nope", "", 400, "INVALID_ARGUMENT"},
		{"no key", stream, geminiBody, "", "", 403, "PERMISSION_DENIED"},
		{"no alt=sse", url + "/v1beta/models/m:streamGenerateContent", geminiBody, "goog-key", "", 400, "INVALID_ARGUMENT"},
		{"no contents", stream, `{}`, "goog-key", "", 400, "INVALID_ARGUMENT"},
		{"http error", stream, geminiBody, "goog-key", `{"kind":"http_error","status":429}`, 429, "RESOURCE_EXHAUSTED"},
		{"unknown method", url + "/v1beta/models/m:embedContent", geminiBody, "goog-key", "", 404, "NOT_FOUND"},
	} {
		h := []string{"x-goog-api-key", tc.key}
		if tc.turn != "" {
			h = append(h, HeaderTurn, tc.turn)
		}
		resp, b := geminiPost(t, tc.url, tc.body, h...)
		e := gjson.GetBytes(b, "error")
		if resp.StatusCode != tc.status || e.Get("code").Int() != int64(tc.status) || e.Get("status").Str != tc.gstatus {
			t.Errorf("%s: %d %s", tc.name, resp.StatusCode, b)
		}
	}

	// An error in the stream ends it with Google's error object.
	_, b = geminiPost(t, stream, geminiBody, "x-goog-api-key", "goog-key", HeaderTurn, `{"kind":"error_midstream"}`)
	if res := streamtest.MustDecode(t, d, b); len(res.Errors) != 1 || res.Errors[0].Type != "UNAVAILABLE" {
		t.Fatalf("error midstream: %+v\n%s", res, b)
	}

	resp, b = geminiPost(t, url+"/v1beta/models/gemini-2.5-pro:countTokens", geminiBody, "x-goog-api-key", "goog-key")
	if resp.StatusCode != 200 || gjson.GetBytes(b, "totalTokens").Int() < 1 {
		t.Fatalf("countTokens: %d %s", resp.StatusCode, b)
	}
}
