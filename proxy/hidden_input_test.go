package proxy_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"

	"gatekeeper/trajectory"
)

// fileDocumentTurn asks about a document by its Files API id: the body
// is a few hundred bytes, the input the provider reads may be the whole
// context window.
func fileDocumentTurn(t *testing.T, base, spec string) (*anthropic.Message, error) {
	t.Helper()
	c := anthropic.NewClient(aoption.WithBaseURL(base), aoption.WithAPIKey(vkA), aoption.WithMaxRetries(0),
		aoption.WithHeader("X-Mock-Turn", spec))
	return c.Messages.New(ctxT(t), anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 1024,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(
			anthropic.NewDocumentBlock(anthropic.FileDocumentSourceParam{FileID: "file_011CNha8iCJcU1wXNR6q4V8w"}),
			anthropic.NewTextBlock("summarize the contract"))}})
}

// A $1 run whose call references a large document by id: its worst case
// counts the tenant's max_input_tokens (a million by default) of input,
// which $1 cannot pay, so it is refused before the provider reads the
// document, and nothing is charged. Without this the call weighed its
// 300-byte body and went out; the provider's 600,000 input tokens cost
// $3.60 of a $1 budget.
func TestHiddenInputRefusedByBudget(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.seedBudget(t, "doc", trajectory.Budget{Dollars: 1})
	spec := `{"kind":"text","text":"the contract says","usage":{"input_tokens":600000}}`
	_, err := fileDocumentTurn(t, e.gk+"/t/doc/anthropic", spec)
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusPaymentRequired {
		t.Fatalf("want 402, got %v", err)
	}
	if up := len(e.mock.Requests()); up != 0 {
		t.Errorf("the provider got %d requests", up)
	}
	if rec := e.record(t, "doc"); rec.Spend.Dollars != 0 {
		t.Errorf("charged $%v", rec.Spend.Dollars)
	}
}

// With room for the whole window (a million input tokens at Sonnet's
// highest long-prompt input rate, the 1-hour cache write's, $12.58), the
// same call goes out, and is charged what the provider reported: 600,000
// input tokens at the long prompt rate, $3.60.
func TestHiddenInputAdmittedWithinBudget(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.seedBudget(t, "doc5", trajectory.Budget{Dollars: 20})
	spec := `{"kind":"text","text":"the contract says","usage":{"input_tokens":600000,"output_tokens":10}}`
	if _, err := fileDocumentTurn(t, e.gk+"/t/doc5/anthropic", spec); err != nil {
		t.Fatal(err)
	}
	var rec *trajectory.Record
	waitFor(t, "the turn recorded", func() bool { rec = e.record(t, "doc5"); return rec.Turns == 1 })
	if rec.Spend.Dollars < 3.6 || rec.Spend.Dollars > 3.61 {
		t.Errorf("charged $%v, want the reported 600,000 input tokens' $3.60", rec.Spend.Dollars)
	}
}
