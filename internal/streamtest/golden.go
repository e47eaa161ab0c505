package streamtest

import (
	"errors"
	"reflect"
	"testing"

	"gatekeeper/internal/fixturetest"
	"gatekeeper/streaming"
)

// Golden is what a test expects of one decoded reply: the Result's facts
// plus the text its deltas carried.
type Golden struct {
	ID, Model string
	Stops     []streaming.Stop
	Calls     []GoldenCall
	Usage     *streaming.Usage // nil: no usage report
	Errors    []string
	Done      bool
	Truncated bool
	Unparsed  int
	Text      string // text deltas, in arrival order
	Thinking  string
	Refusal   string
}

// GoldenCall is a tool call as a Golden states it.
type GoldenCall struct {
	Choice, Index    int
	Type, ID, ItemID string
	Name, Args       string
	Complete, Server bool
}

// StreamCase is a golden for one testdata stream.
type StreamCase struct {
	File string
	Want Golden
}

// JSONCase is a golden for one whole reply body; Err when it is not one.
type JSONCase struct {
	Name string
	Body string
	Want Golden
	Err  bool
}

// CheckSays checks the decoder's counts against what the stream says
// read apart from it: every text, thinking, refusal and arguments delta
// counts in OutputBytes (and server-run calls' arguments, which may come
// whole), text and refusals in TextBytes.
func CheckSays(t *testing.T, res *streaming.Result, said Says) {
	t.Helper()
	if want := int64(len(said.Text) + len(said.Refusal)); res.TextBytes != want {
		t.Errorf("TextBytes = %d, the stream says %d bytes of text and refusal", res.TextBytes, want)
	}
	deltaBytes := int64(len(said.Text) + len(said.Thinking) + len(said.Refusal) + len(said.Args))
	if res.OutputBytes < deltaBytes {
		t.Errorf("OutputBytes = %d, the stream's deltas carry %d", res.OutputBytes, deltaBytes)
	}
}

// Digest reduces a Result and what the stream says to what goldens state,
// and checks the invariants every reply must keep.
func Digest(t *testing.T, res *streaming.Result, said Says) Golden {
	t.Helper()
	g := DigestJSON(res)
	for _, e := range res.Errors {
		if len(e.Raw) == 0 {
			t.Errorf("error %q kept no raw JSON", e.Message)
		}
	}
	g.Text, g.Thinking, g.Refusal = said.Text, said.Thinking, said.Refusal
	CheckSays(t, res, said)
	return g
}

// DigestJSON reduces a non-streaming Result (no deltas) for goldens.
func DigestJSON(res *streaming.Result) Golden {
	g := Golden{ID: res.MessageID, Model: res.Model, Stops: res.Stops, Done: res.Done, Truncated: res.Truncated, Unparsed: res.Unparsed}
	for _, tc := range res.ToolCalls {
		g.Calls = append(g.Calls, GoldenCall{
			Choice: tc.Choice, Index: tc.Index, Type: tc.Type, ID: tc.ID, ItemID: tc.ItemID, Name: tc.Name,
			Args: string(tc.Arguments), Complete: tc.Complete, Server: tc.Server,
		})
	}
	if res.UsageSeen {
		u := res.Usage
		g.Usage = &u
	}
	for _, e := range res.Errors {
		g.Errors = append(g.Errors, e.Type+": "+e.Message)
	}
	return g
}

// Compare fails when got is not want.
func Compare(t *testing.T, got, want Golden) {
	t.Helper()
	if !reflect.DeepEqual(got.Calls, want.Calls) {
		t.Errorf("calls:\n got %+v\nwant %+v", got.Calls, want.Calls)
	}
	if !reflect.DeepEqual(got.Usage, want.Usage) {
		t.Errorf("usage: got %+v, want %+v", got.Usage, want.Usage)
	}
	got.Calls, want.Calls, got.Usage, want.Usage = nil, nil, nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("\n got %+v\nwant %+v", got, want)
	}
}

// CheckStreams decodes the stream of each case in dir with d, reads what
// it says with says, and compares both with its golden; every stream of
// dir must have one.
func CheckStreams(t *testing.T, d streaming.Dialect, says func(testing.TB, []byte) Says, dir string, cases []StreamCase) {
	t.Helper()
	covered := map[string]bool{}
	for _, tt := range cases {
		covered[tt.File] = true
		t.Run(tt.File, func(t *testing.T) {
			stream := fixturetest.ReadFile(t, dir, tt.File)
			Compare(t, Digest(t, MustDecode(t, d, stream), says(t, stream)), tt.Want)
		})
	}
	CheckCovered(t, dir, covered)
}

// CheckJSONCases decodes each case's body with d and compares it with its
// golden; a case with Err must fail with streaming.ErrInvalidJSON.
func CheckJSONCases(t *testing.T, d streaming.Dialect, cases []JSONCase) {
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			res, err := d.DecodeJSON([]byte(tt.Body))
			if tt.Err {
				if !errors.Is(err, streaming.ErrInvalidJSON) || res != nil {
					t.Fatalf("got %v, %v; want ErrInvalidJSON", res, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.API != d.API() {
				t.Errorf("API = %q", res.API)
			}
			Compare(t, DigestJSON(res), tt.Want)
		})
	}
}
