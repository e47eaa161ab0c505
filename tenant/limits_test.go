package tenant

import (
	"testing"
	"time"
)

func TestFreesAt(t *testing.T) {
	now := time.Date(2026, 12, 3, 14, 20, 0, 0, time.UTC)
	micros := func(a Amount) int64 { return a.Micros }
	var u Usage
	u.Now = now
	u.Hours[0] = Amount{Micros: 300}  // 15:00 yesterday, leaves at 15:00 today
	u.Hours[5] = Amount{Micros: 300}  // 20:00 yesterday, leaves at 20:00 today
	u.Hours[23] = Amount{Micros: 300} // this hour, leaves at 14:00 tomorrow
	u.Days[29] = Amount{Micros: 900}
	cases := []struct {
		name        string
		month       bool
		need, limit int64
		want        time.Time
		ok          bool
	}{
		{"fits now", false, 100, 1000, now, true},
		{"after the oldest hour", false, 300, 1000, time.Date(2026, 12, 3, 15, 0, 0, 0, time.UTC), true},
		{"after two hours", false, 500, 1000, time.Date(2026, 12, 3, 20, 0, 0, 0, time.UTC), true},
		{"only when all left", false, 1000, 1000, time.Date(2026, 12, 4, 14, 0, 0, 0, time.UTC), true},
		{"never", false, 1001, 1000, time.Time{}, false},
		{"month", true, 200, 1000, time.Date(2027, 1, 2, 0, 0, 0, 0, time.UTC), true},
		{"month fits now", true, 100, 1000, now, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := u.FreesAt(tc.month, micros, tc.need, tc.limit)
			if ok != tc.ok || !got.Equal(tc.want) {
				t.Fatalf("FreesAt = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
	if d := u.Day().Micros; d != 900 {
		t.Errorf("Day = %d", d)
	}
	if m := u.Month().Micros; m != 900 {
		t.Errorf("Month = %d", m)
	}
}

// TestFreesAtWeek: the week is the last 7 daily buckets; spend from
// before them does not count, and a day's spend leaves the week when the
// day 7 after it begins.
func TestFreesAtWeek(t *testing.T) {
	now := time.Date(2026, 12, 3, 14, 20, 0, 0, time.UTC)
	micros := func(a Amount) int64 { return a.Micros }
	var u Usage
	u.Now = now
	u.Days[DayBuckets-8] = Amount{Micros: 5000} // 8 days ago: out of the week
	u.Days[DayBuckets-7] = Amount{Micros: 400}  // 6 days ago, leaves at the start of tomorrow
	u.Days[DayBuckets-1] = Amount{Micros: 400}  // today
	if w := u.Week().Micros; w != 800 {
		t.Fatalf("Week = %d, want 800", w)
	}
	got, ok := u.FreesAtDays(WeekBuckets, micros, 500, 1000)
	if want := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC); !ok || !got.Equal(want) {
		t.Fatalf("FreesAtDays = %v, %v; want %v", got, ok, want)
	}
	if got, ok := u.FreesAtDays(WeekBuckets, micros, 200, 1000); !ok || !got.Equal(now) {
		t.Fatalf("FreesAtDays(fits) = %v, %v; want now", got, ok)
	}
}
