package admit

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestResultsDataAsMaps pins that the tool_results and
// tool_result_unknown events' data are the bytes the maps they replaced
// marshalled to.
func TestResultsDataAsMaps(t *testing.T) {
	lists := [][]string{nil, {}, {"toolu_1"}, {"call_a", "call_b"}, {`"<&>"`, "\u2028", "\xff"}}
	for _, a := range lists {
		for _, u := range lists {
			got, err := json.Marshal(toolResults{Accepted: a, Unanswered: u})
			if err != nil {
				t.Fatal(err)
			}
			want, _ := json.Marshal(map[string]any{"accepted": a, "unanswered": u})
			if !bytes.Equal(got, want) {
				t.Fatalf("tool_results data = %s, want %s", got, want)
			}
		}
		got, err := json.Marshal(unknownResults{IDs: a})
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(map[string]any{"ids": a})
		if !bytes.Equal(got, want) {
			t.Fatalf("tool_result_unknown data = %s, want %s", got, want)
		}
	}
}

func BenchmarkToolResultsData(b *testing.B) {
	a, u := []string{"toolu_01", "toolu_02"}, []string{"toolu_03"}
	b.Run("map", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = json.Marshal(map[string]any{"accepted": a, "unanswered": u})
		}
	})
	b.Run("struct", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = json.Marshal(toolResults{Accepted: a, Unanswered: u})
		}
	})
}
