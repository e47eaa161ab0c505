// Package admintest holds the admin API to its contract in tests: it
// validates real requests and responses against the OpenAPI document
// (admin/openapi.json) and the live event stream's events against their
// JSON Schema (admin/events.schema.json), and remembers which operations
// and statuses it saw, so that a test can demand every route answered.
// Only tests import it.
package admintest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"gatekeeper/admin"
)

// base is where the two documents are placed for the schema compiler: the
// events' schema refers to "openapi.json#/...", beside it, as when both
// are fetched from a server's /admin/v1/.
const base = "http://gatekeeper.test/admin/v1/"

// Operation is one documented method and path.
type Operation struct {
	ID, Method, Path string
	// Success is the operation's documented 2xx status.
	Success int
	segs    []string
	op      *openapi3.Operation
	item    *openapi3.PathItem
}

// Contract validates traffic against the documents.
type Contract struct {
	doc    *openapi3.T
	events *jsonschema.Schema
	ops    []*Operation

	mu   sync.Mutex
	seen map[string]map[int]bool // operation id: statuses validated
}

var registerDecoders sync.Once

// Load reads and checks the embedded documents: the OpenAPI document must
// be valid OpenAPI 3.1, the events' schema must compile as JSON Schema
// 2020-12 with its references into the document resolved.
func Load(ctx context.Context) (*Contract, error) {
	registerDecoders.Do(func() {
		openapi3filter.RegisterBodyDecoder("application/schema+json", openapi3filter.JSONBodyDecoder)
	})
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(admin.OpenAPI())
	if err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("openapi.json is OpenAPI %s, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(ctx); err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	events, err := compileEvents()
	if err != nil {
		return nil, err
	}
	c := &Contract{doc: doc, events: events, seen: map[string]map[int]bool{}}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			o := &Operation{ID: op.OperationID, Method: method, Path: path, segs: strings.Split(path, "/"), op: op, item: item}
			for code := range op.Responses.Map() {
				if n, err := strconv.Atoi(code); err == nil && n >= 200 && n < 300 {
					o.Success = n
				}
			}
			if o.ID == "" || o.Success == 0 {
				return nil, fmt.Errorf("openapi.json: %s %s needs an operationId and a 2xx response", method, path)
			}
			c.ops = append(c.ops, o)
		}
	}
	sort.Slice(c.ops, func(i, j int) bool { return c.ops[i].ID < c.ops[j].ID })
	return c, nil
}

func compileEvents() (*jsonschema.Schema, error) {
	comp := jsonschema.NewCompiler()
	comp.DefaultDraft(jsonschema.Draft2020)
	comp.AssertFormat()
	for name, b := range map[string][]byte{"openapi.json": admin.OpenAPI(), "events.schema.json": admin.EventsSchema()} {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if err := comp.AddResource(base+name, v); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	s, err := comp.Compile(base + "events.schema.json")
	if err != nil {
		return nil, fmt.Errorf("events.schema.json: %w", err)
	}
	return s, nil
}

// Operations lists the documented operations, by id.
func (c *Contract) Operations() []*Operation { return c.ops }

// Match finds the operation of method and path (escaped, as sent): each
// {param} of a template stands for one non-empty segment, and of several
// templates that match, the one with the most literal segments wins. It
// returns the path parameters, unescaped.
func (c *Contract) Match(method, escapedPath string) (*Operation, map[string]string, error) {
	segs := strings.Split(escapedPath, "/")
	var best *Operation
	var bestParams map[string]string
	bestLit, tie := -1, false
	for _, o := range c.ops {
		if o.Method != method || len(o.segs) != len(segs) {
			continue
		}
		params, lit, ok := map[string]string{}, 0, true
		for i, s := range o.segs {
			if name, isParam := strings.CutPrefix(s, "{"); isParam {
				v, err := url.PathUnescape(segs[i])
				if err != nil || v == "" {
					ok = false
					break
				}
				params[strings.TrimSuffix(name, "}")] = v
				continue
			}
			if s != segs[i] {
				ok = false
				break
			}
			lit++
		}
		if !ok {
			continue
		}
		switch {
		case lit > bestLit:
			best, bestParams, bestLit, tie = o, params, lit, false
		case lit == bestLit:
			tie = true
		}
	}
	switch {
	case best == nil:
		return nil, nil, fmt.Errorf("%s %s: no documented operation", method, escapedPath)
	case tie:
		return nil, nil, fmt.Errorf("%s %s: several documented operations match", method, escapedPath)
	}
	return best, bestParams, nil
}

// Exchange is one call as it went: the request with its body, and the
// response with its body.
type Exchange struct {
	Request     *http.Request
	RequestBody []byte
	Status      int
	Header      http.Header
	Body        []byte
}

// Check validates one exchange: its request (parameters, body, a bearer
// token where one is required) unless it was answered 400 or 401, which a
// test earns with a request the document does not allow on purpose, and
// its response (status documented, headers, body) always. A
// text/event-stream body is not read here: its events go through
// CheckEvent.
func (c *Contract) Check(ctx context.Context, x Exchange) error {
	o, params, err := c.Match(x.Request.Method, x.Request.URL.EscapedPath())
	if err != nil {
		return err
	}
	route := &routers.Route{Spec: c.doc, Path: o.Path, PathItem: o.item, Method: o.Method, Operation: o.op}
	req := x.Request.Clone(ctx)
	req.Body = io.NopCloser(bytes.NewReader(x.RequestBody))
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{MultiError: true, AuthenticationFunc: bearer}}
	if x.Status != http.StatusBadRequest && x.Status != http.StatusUnauthorized {
		if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
			return fmt.Errorf("%s (%s %s): request: %w", o.ID, o.Method, x.Request.URL, err)
		}
	}
	sse := strings.HasPrefix(x.Header.Get("Content-Type"), "text/event-stream")
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: x.Status, Header: x.Header,
		Body:    io.NopCloser(bytes.NewReader(x.Body)),
		Options: &openapi3filter.Options{MultiError: true, IncludeResponseStatus: true, ExcludeResponseBody: sse}}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		return fmt.Errorf("%s (%s %s): response %d: %w\nbody: %s", o.ID, o.Method, x.Request.URL, x.Status, err, x.Body)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[o.ID] == nil {
		c.seen[o.ID] = map[int]bool{}
	}
	c.seen[o.ID][x.Status] = true
	return nil
}

// bearer accepts a request that carries a bearer token where the document
// asks for one; whether the token is good is the server's to say.
func bearer(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	h := in.RequestValidationInput.Request.Header.Get("Authorization")
	if len(h) <= len("Bearer ") || !strings.EqualFold(h[:len("Bearer ")], "Bearer ") {
		return errors.New("no bearer token")
	}
	return nil
}

// CheckEvent validates the data line of one stream event.
func (c *Contract) CheckEvent(data []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("event is not JSON: %w: %s", err, data)
	}
	if err := c.events.Validate(v); err != nil {
		return fmt.Errorf("event: %w\nevent: %s", err, data)
	}
	return nil
}

// Unseen lists the operations no exchange validated with their documented
// success status.
func (c *Contract) Unseen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, o := range c.ops {
		if !c.seen[o.ID][o.Success] {
			out = append(out, fmt.Sprintf("%s (%s %s, %d)", o.ID, o.Method, o.Path, o.Success))
		}
	}
	return out
}

// Statuses lists the statuses validated for any operation.
func (c *Contract) Statuses() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for _, st := range c.seen {
		for s := range st {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Samples are paths of the operation with its parameters filled in: every
// value of an enumerated parameter, "x" for the others.
func (o *Operation) Samples() []string {
	paths := []string{""}
	for _, s := range o.segs[1:] {
		vals := []string{s}
		if name, ok := strings.CutPrefix(s, "{"); ok {
			vals = []string{"x"}
			if p := o.op.Parameters.GetByInAndName("path", strings.TrimSuffix(name, "}")); p != nil && p.Schema != nil && p.Schema.Value != nil && len(p.Schema.Value.Enum) > 0 {
				vals = vals[:0]
				for _, e := range p.Schema.Value.Enum {
					vals = append(vals, fmt.Sprint(e))
				}
			}
		}
		var next []string
		for _, p := range paths {
			for _, v := range vals {
				next = append(next, p+"/"+v)
			}
		}
		paths = next
	}
	return paths
}
