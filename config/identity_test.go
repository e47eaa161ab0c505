package config

import "testing"

func TestModelAllowed(t *testing.T) {
	id := Identity{Models: []GroupModels{
		{Group: "contractors", Allow: []string{"claude-haiku-*"}},
		{Group: "research", Allow: []string{"claude-opus-4-5", "gpt-*-mini"}},
	}}
	cases := []struct {
		name   string
		groups []string
		model  string
		want   bool
	}{
		{"no listed group", []string{"eng"}, "claude-opus-4-5", true},
		{"no groups", nil, "anything", true},
		{"pattern", []string{"contractors"}, "claude-haiku-4-5", true},
		{"pattern misses", []string{"contractors"}, "claude-sonnet-4-5", false},
		{"an unlisted group does not lift a list", []string{"eng", "contractors"}, "claude-sonnet-4-5", false},
		{"union of lists", []string{"contractors", "research"}, "claude-opus-4-5", true},
		{"inner star", []string{"research"}, "gpt-5-mini", true},
		{"inner star misses", []string{"research"}, "gpt-5", false},
		{"exact only", []string{"research"}, "claude-opus-4-5-x", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := id.ModelAllowed(tc.groups, tc.model); got != tc.want {
				t.Fatalf("ModelAllowed(%v, %q) = %v, want %v", tc.groups, tc.model, got, tc.want)
			}
		})
	}
}

func TestMatchModel(t *testing.T) {
	cases := []struct {
		pattern, model string
		want           bool
	}{
		{"*", "", true},
		{"a*", "a", true},
		{"a*c", "abbc", true},
		{"a*c", "abbd", false},
		{"*-mini", "gpt-5-mini", true},
		{"a**b", "axb", true},
		{"a", "A", false},
	}
	for _, tc := range cases {
		if got := MatchModel(tc.pattern, tc.model); got != tc.want {
			t.Errorf("MatchModel(%q, %q) = %v, want %v", tc.pattern, tc.model, got, tc.want)
		}
	}
}
