package jsonscan

import "testing"

func TestSetMembers(t *testing.T) {
	got := SetMembers(nil, `{"a":1, "b":{"c":2},"a":3,"d":4}`, Set{"a", `"x"`}, Set{"d", ""}, Set{"e", "[]"})
	if want := `{"a":"x","b":{"c":2},"a":"x","e":[]}`; string(got) != want {
		t.Errorf("setMembers = %s, want %s", got, want)
	}
}
