package memory

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestExpiriesOrder: entries come out of due earliest first, and only
// once due, whatever order they went in.
func TestExpiriesOrder(t *testing.T) {
	base := time.Unix(1_700_000_000, 0)
	r := rand.New(rand.NewPCG(1, 2))
	var q expiries
	var want []int
	for i := range 500 {
		s := r.IntN(1000)
		want = append(want, s)
		q.push(string(rune('a'+i%26)), base.Add(time.Duration(s)*time.Second))
	}
	slices.Sort(want)
	if _, at, ok := q.first(); !ok || !at.Equal(base.Add(time.Duration(want[0])*time.Second)) {
		t.Fatalf("first = %v, %v; want the earliest", at, ok)
	}
	if _, _, ok := q.due(base.Add(time.Duration(want[0])*time.Second - time.Nanosecond)); ok {
		t.Fatal("due before the earliest entry's time")
	}
	var got []int
	for {
		_, at, ok := q.due(base.Add(2000 * time.Second))
		if !ok {
			break
		}
		got = append(got, int(at.Sub(base)/time.Second))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("due order = %v..., want %v...", got[:10], want[:10])
	}
}
