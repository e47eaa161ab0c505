package report

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func spendRuns() []SpendRun {
	ada := &Spender{Subject: "sub-ada", Label: "ada@example.com", Groups: []string{"platform", "sre", "platform"}}
	bob := &Spender{Subject: "sub-bob", Label: "bob\x1b[2J", Groups: []string{"sre"}}
	cy := &Spender{Subject: "sub-cy", Label: "cy"}
	return []SpendRun{
		{Tenant: "team-a", Person: ada, Turns: 3, Tokens: 300, Dollars: 1.5},
		{Tenant: "team-a", Person: ada, Turns: 1, Tokens: 100, Dollars: 0.5},
		{Tenant: "team-b", Person: bob, Turns: 2, Tokens: 50, Dollars: 0.25},
		{Tenant: "team-a", Person: cy, Turns: 1, Tokens: 10, Dollars: 0.01},
		{Tenant: "team-a", Turns: 5, Tokens: 500, Dollars: 3},
		{Tenant: "team-b", Turns: 1, Tokens: 1, Dollars: -2}, // no store writes one; counts as 0
	}
}

func TestBuildSpend(t *testing.T) {
	type row struct {
		kind, key, label string
		runs             int
		turns            int64
		dollars          float64
	}
	for _, tc := range []struct {
		by   By
		want []row
	}{
		{ByPerson, []row{
			{RowVirtualKey, "team-a", "(virtual key: team-a)", 1, 5, 3},
			{RowPerson, "sub-ada", "ada@example.com", 2, 4, 2},
			{RowPerson, "sub-bob", "bob\x1b[2J", 1, 2, 0.25},
			{RowPerson, "sub-cy", "cy", 1, 1, 0.01},
			{RowVirtualKey, "team-b", "(virtual key: team-b)", 1, 1, 0},
		}},
		{ByGroup, []row{
			{RowVirtualKey, "team-a", "(virtual key: team-a)", 1, 5, 3},
			{RowGroup, "sre", "sre", 3, 6, 2.25},
			{RowGroup, "platform", "platform", 2, 4, 2},
			{RowNoGroup, "", "(no group)", 1, 1, 0.01},
			{RowVirtualKey, "team-b", "(virtual key: team-b)", 1, 1, 0},
		}},
	} {
		t.Run(string(tc.by), func(t *testing.T) {
			s, err := BuildSpend(spendRuns(), tc.by)
			if err != nil {
				t.Fatal(err)
			}
			if s.Runs != 6 || s.Turns != 13 || s.Dollars != 5.26 {
				t.Errorf("totals: %d runs, %d turns, $%v; want 6, 13, $5.26 (each run once)", s.Runs, s.Turns, s.Dollars)
			}
			var got []row
			for _, r := range s.Rows {
				got = append(got, row{r.Kind, r.Key, r.Label, r.Runs, r.Turns, r.Dollars})
			}
			if len(got) != len(tc.want) {
				t.Fatalf("rows\n got %+v\nwant %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("row %d: got %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
	if _, err := BuildSpend(nil, "tenant"); !errors.Is(err, ErrOptions) {
		t.Errorf("by tenant: %v, want ErrOptions", err)
	}
}

func TestSpendWrites(t *testing.T) {
	s, err := BuildSpend(spendRuns(), ByGroup)
	if err != nil {
		t.Fatal(err)
	}
	s.Scope = Scope{Tenant: "team-a"}
	var text bytes.Buffer
	if err := WriteSpendText(&text, s); err != nil {
		t.Fatal(err)
	}
	out := text.String()
	for _, want := range []string{"spend by group: 6 runs, 13 turns, 961 tokens, $5.2600 (tenant team-a)",
		"counts in full under each group", "sre ", "$2.2500", "(virtual key: team-a)", "(no group)"} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	var js bytes.Buffer
	if err := WriteSpendJSON(&js, s); err != nil {
		t.Fatal(err)
	}
	back, err := DecodeSpend(js.Bytes())
	if err != nil || back.By != ByGroup || len(back.Rows) != len(s.Rows) || back.Rows[1].Key != "sre" {
		t.Errorf("JSON round trip: %+v, %v", back, err)
	}
	if _, err := DecodeSpend([]byte(`{"scope":{},"runs":1,"classes":[]}`)); err == nil {
		t.Error("a cost-vs-success report decoded as a spend report")
	}

	p, err := BuildSpend(spendRuns(), ByPerson)
	if err != nil {
		t.Fatal(err)
	}
	text.Reset()
	if err := WriteSpendText(&text, p); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text.String(), "\x1b") || !strings.Contains(text.String(), "bob?[2J") {
		t.Errorf("a label's control characters reached the terminal:\n%q", text.String())
	}
}
