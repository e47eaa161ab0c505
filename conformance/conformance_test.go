// Package conformance runs a corpus of requests and provider replies
// through the real gatekeeper binary: path spellings, repeated and
// case-variant members in requests, replies and tool inputs, the header
// policy, HTTP framing, compressed replies and SSE edge cases. Each case
// says what the agent must get and whether the provider may see the
// request at all; cases/*.json hold them, one file per class.
package conformance

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gatekeeper/internal/gkproc"
)

// Case is one request and the reply the provider gives it, with what
// must come of them.
type Case struct {
	Name string `json:"name"`
	// Method (default POST), Path, Headers (added to the defaults of the
	// path's API: the virtual key, a JSON body; a header set to "" is
	// left out) and Body (JSON; default a small turn of the API) or
	// BodyText (sent as it is).
	Method   string            `json:"method"`
	Path     string            `json:"path"`
	Headers  map[string]string `json:"headers"`
	Body     json.RawMessage   `json:"body"`
	BodyText *string           `json:"body_text"`
	// Raw is a whole HTTP/1.1 request sent as it is on a connection of
	// its own ({{VK}} stands for the virtual key); it replaces the fields
	// above.
	Raw      string   `json:"raw"`
	Upstream Upstream `json:"upstream"`
	Expect   Expect   `json:"expect"`
}

// Upstream is the provider's reply: default a small complete reply of the
// API, JSON; Stream (SSE text) or Body (JSON) replace it.
type Upstream struct {
	Status   int               `json:"status"`
	Headers  map[string]string `json:"headers"`
	Body     json.RawMessage   `json:"body"`
	Stream   string            `json:"stream"`
	Encoding string            `json:"encoding"` // "gzip": the body compressed so, with Content-Encoding
}

// Expect is what the agent and the provider must see.
type Expect struct {
	Status int `json:"status"`
	// Reaches says whether the provider may get the request: false for
	// anything gatekeeper must refuse.
	Reaches bool `json:"reaches_upstream"`
	// UpstreamPath is the path the provider gets; UpstreamHeaders the
	// values it gets, UpstreamLacks the headers it must not get.
	UpstreamPath    string            `json:"upstream_path"`
	UpstreamHeaders map[string]string `json:"upstream_headers"`
	UpstreamLacks   []string          `json:"upstream_lacks"`
	// ErrorType is the error's type in the provider's format.
	ErrorType    string            `json:"error_type"`
	BodyContains []string          `json:"body_contains"`
	BodyLacks    []string          `json:"body_lacks"`
	Headers      map[string]string `json:"headers"`
	Lacks        []string          `json:"lacks_headers"`
}

const (
	virtualKey   = "vk-conformance-0001"
	anthropicKey = "sk-ant-pool-conformance-0001"
	openaiKey    = "sk-openai-pool-conformance-0002"
)

// upstream is the scripted provider: it answers each request with the
// reply of the case being run, and keeps what it got.
type upstream struct {
	mu   sync.Mutex
	cur  *Case
	got  []*http.Request
	errs []error
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	c := u.cur
	r2 := r.Clone(r.Context())
	u.got = append(u.got, r2)
	u.mu.Unlock()
	_, _ = io.Copy(io.Discard, r.Body)
	if c == nil {
		http.Error(w, "no case", http.StatusTeapot)
		return
	}
	up := c.Upstream
	api := apiOf(c.Path)
	body, ct := []byte(up.Body), "application/json"
	switch {
	case up.Stream != "":
		body, ct = []byte(strings.ReplaceAll(up.Stream, `\r\n`, "\r\n")), "text/event-stream"
	case len(body) == 0:
		body = []byte(defaultReply[api])
	}
	for k, v := range up.Headers {
		w.Header().Set(k, v)
	}
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", ct)
	}
	if up.Encoding == "gzip" {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, _ = zw.Write(body)
		_ = zw.Close()
		body = b.Bytes()
		w.Header().Set("Content-Encoding", "gzip")
	}
	status := up.Status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (u *upstream) start(c *Case) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.cur, u.got = c, nil
}

func (u *upstream) requests() []*http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.got)
}

func apiOf(path string) string {
	switch {
	case strings.Contains(path, "chat/completions"):
		return "chat"
	case strings.Contains(path, "/responses"):
		return "responses"
	case strings.Contains(path, "/openai"):
		return "chat"
	}
	return "anthropic"
}

var defaultRequest = map[string]string{
	"anthropic": `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hello"}]}`,
	"chat":      `{"model":"gpt-4.1","max_completion_tokens":64,"messages":[{"role":"user","content":"hello"}]}`,
	"responses": `{"model":"gpt-4.1","max_output_tokens":64,"input":"hello"}`,
}

var defaultReply = map[string]string{
	"anthropic": `{"id":"msg_c1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"conformance reply"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":3}}`,
	"chat":      `{"id":"c_c1","object":"chat.completion","created":1,"model":"gpt-4.1","choices":[{"index":0,"message":{"role":"assistant","content":"conformance reply"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`,
	"responses": `{"id":"resp_c1","object":"response","created_at":1,"status":"completed","model":"gpt-4.1","output":[{"type":"message","id":"msg_c1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"conformance reply","annotations":[]}]}],"usage":{"input_tokens":5,"output_tokens":3,"total_tokens":8}}`,
}

const configTemplate = `listen: 127.0.0.1:0
log: {format: json, level: info}
store: {kind: memory}
providers:
  - {name: anthropic, api: anthropic, base_url: %[1]s, default: true, keys: [{name: k, key: %[2]s}]}
  - {name: openai, api: openai, base_url: %[1]s, keys: [{name: k, key: %[3]s}]}
tenants:
  - {name: team-a, keys: [%[4]s]}
  - {name: byo, keys: [vk-conformance-byo-0001], credentials: forward}
gates:
  - name: destructive-shell
    when: tool.class == "shell" && tool.command.matches(r'\brm\s')
    approvers: {roles: [secops], quorum: 1}
    on_refusal: end_turn
admin:
  tokens: [{name: admin, token: admin-token-conformance, roles: [operator]}]
approvals:
  people: [{name: admin, admin_tokens: [admin], roles: [secops]}]
`

func loadCases(t *testing.T) map[string][]Case {
	t.Helper()
	files, err := filepath.Glob("cases/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	out := map[string][]Case{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cs []Case
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cs); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".json")] = cs
	}
	return out
}

// TestConformance runs every case of cases/ through one gatekeeper
// process, one after the other, and prints how many ran per class.
func TestConformance(t *testing.T) {
	classes := loadCases(t)
	up := &upstream{}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, configTemplate, srv.URL, anthropicKey, openaiKey, virtualKey), 0o600); err != nil {
		t.Fatal(err)
	}
	gk := gkproc.Start(t, gkproc.Build(t), cfg, nil)
	total := 0
	for _, class := range slices.Sorted(func(yield func(string) bool) {
		for k := range classes {
			if !yield(k) {
				return
			}
		}
	}) {
		for i := range classes[class] {
			c := &classes[class][i]
			total++
			t.Run(class+"/"+c.Name, func(t *testing.T) {
				up.start(c)
				status, header, body := send(t, gk.Base, c)
				check(t, c, status, header, body, up.requests())
			})
		}
		t.Logf("class %s: %d cases", class, len(classes[class]))
	}
	t.Logf("conformance: %d cases in %d classes", total, len(classes))
	fmt.Printf("conformance: %d cases in %d classes\n", total, len(classes))
	if t.Failed() {
		t.Logf("gatekeeper's log:\n%s", gk.Log())
	}
}

// send makes the case's request and returns what the agent got.
func send(t *testing.T, base string, c *Case) (int, http.Header, string) {
	t.Helper()
	if c.Raw != "" {
		return sendRaw(t, base, c)
	}
	api := apiOf(c.Path)
	body := []byte(defaultRequest[api])
	switch {
	case c.BodyText != nil:
		body = []byte(*c.BodyText)
	case len(c.Body) > 0:
		body = c.Body
	}
	method := c.Method
	if method == "" {
		method = http.MethodPost
	}
	req, err := http.NewRequest(method, base+c.Path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	// The path as written, escapes and all.
	req.URL.Opaque = "//" + req.URL.Host + c.Path
	if i := strings.IndexByte(c.Path, '?'); i >= 0 {
		req.URL.Opaque, req.URL.RawQuery = "//"+req.URL.Host+c.Path[:i], c.Path[i+1:]
	}
	req.Header.Set("Content-Type", "application/json")
	if api == "anthropic" {
		req.Header.Set("x-api-key", virtualKey)
		req.Header.Set("anthropic-version", "2023-06-01")
	} else {
		req.Header.Set("Authorization", "Bearer "+virtualKey)
	}
	for k, v := range c.Headers {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, strings.ReplaceAll(v, "{{VK}}", virtualKey))
	}
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableCompression: true}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		t.Fatalf("reading the reply: %v", err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// sendRaw writes the case's raw request on a connection of its own and
// reads the first response.
func sendRaw(t *testing.T, base string, c *Case) (int, http.Header, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	raw := strings.ReplaceAll(c.Raw, "{{VK}}", virtualKey)
	raw = strings.ReplaceAll(raw, `\r\n`, "\r\n")
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, resp.Header, string(b)
}

func check(t *testing.T, c *Case, status int, header http.Header, body string, got []*http.Request) {
	t.Helper()
	e := c.Expect
	if status != e.Status {
		t.Errorf("status %d, want %d; body %s", status, e.Status, body)
	}
	if reached := len(got) > 0; reached != e.Reaches {
		t.Errorf("reached the provider: %v, want %v", reached, e.Reaches)
	}
	if e.ErrorType != "" {
		var v struct {
			Error struct {
				Type string `json:"type"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil || v.Error.Type != e.ErrorType {
			t.Errorf("error type %q, want %q; body %s", v.Error.Type, e.ErrorType, body)
		}
	}
	for _, s := range e.BodyContains {
		if !strings.Contains(body, s) {
			t.Errorf("the reply lacks %q: %s", s, body)
		}
	}
	for _, s := range e.BodyLacks {
		if strings.Contains(body, s) {
			t.Errorf("the reply carries %q: %s", s, body)
		}
	}
	for k, v := range e.Headers {
		if got := header.Get(k); got != v {
			t.Errorf("reply header %s: %q, want %q", k, got, v)
		}
	}
	for _, k := range e.Lacks {
		if v := header.Values(k); len(v) > 0 {
			t.Errorf("reply header %s present: %q", k, v)
		}
	}
	if len(got) == 0 {
		return
	}
	r := got[0]
	if e.UpstreamPath != "" && r.URL.EscapedPath() != e.UpstreamPath {
		t.Errorf("the provider got path %q, want %q", r.URL.EscapedPath(), e.UpstreamPath)
	}
	for k, v := range e.UpstreamHeaders {
		if g := r.Header.Get(k); g != v {
			t.Errorf("the provider got %s %q, want %q", k, g, v)
		}
	}
	for _, k := range e.UpstreamLacks {
		if v := r.Header.Values(k); len(v) > 0 {
			t.Errorf("the provider got %s: %q", k, v)
		}
	}
	for _, r := range got {
		for k, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, virtualKey) {
					t.Errorf("the provider got the virtual key in %s", k)
				}
			}
		}
	}
}
