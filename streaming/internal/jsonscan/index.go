package jsonscan

import "github.com/tidwall/gjson"

// Index reads an index (a content block's, an output item's, a choice's):
// a non-negative integer below 2^31.
func Index(r gjson.Result) (int, bool) {
	if r.Type != gjson.Number || r.Num < 0 || r.Num > 1<<31 || r.Num != float64(int64(r.Num)) {
		return 0, false
	}
	return int(r.Num), true
}

// MemberIndex reads an index from a member's raw value, sparing gjson
// the plain digits most indexes are.
func MemberIndex(m Member) (int, bool) {
	v := m.Val
	if v == "" || len(v) > 10 {
		return Index(gjson.Parse(v))
	}
	n := 0
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return Index(gjson.Parse(v)) // 1.0, 1e0, -1, "1": let gjson judge
		}
		n = n*10 + int(v[i]-'0')
	}
	return Index(gjson.Result{Type: gjson.Number, Num: float64(n)})
}
