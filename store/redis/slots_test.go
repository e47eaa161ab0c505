package redis

import "testing"

func TestSlotOf(t *testing.T) {
	// Values CLUSTER KEYSLOT gives; "123456789" is CRC16/XMODEM's check
	// value 0x31C3.
	tests := []struct {
		tag  string
		want int
	}{
		{"123456789", 0x31C3},
		{"foo", 12182},
		{"bar", 5061},
		{"", 0},
	}
	for _, tc := range tests {
		if got := slotOf(tc.tag); got != tc.want {
			t.Errorf("slotOf(%q) = %d, want %d", tc.tag, got, tc.want)
		}
	}
}

func TestSlotTags(t *testing.T) {
	tags := slotTags()
	seen := make(map[string]bool, numSlots)
	for s, tag := range tags {
		if slotOf(tag) != s {
			t.Fatalf("tag %q of slot %d hashes to %d", tag, s, slotOf(tag))
		}
		if seen[tag] || len(tag) > 6 {
			t.Fatalf("tag %q repeated or longer than 6 bytes", tag)
		}
		seen[tag] = true
	}
	for _, root := range []string{"run-42", "a", "0123456789abcdef"} {
		if slotOf(shardOf(root)) != slotOf(root) {
			t.Errorf("shard of %q is not in its slot", root)
		}
	}
}
