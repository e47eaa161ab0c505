package streaming_test

import (
	"testing"

	"gatekeeper/streaming/sse"
)

// BenchmarkToolCallPath measures what a streamed turn with a call filter
// costs per reply: a Reader in network-sized reads, the API's decoder on
// every event and the filter writing what the agent receives, as the proxy
// runs them.
func BenchmarkToolCallPath(b *testing.B) {
	for _, bc := range filterBenchCases() {
		b.Run(bc.name, func(b *testing.B) {
			const read = 4 << 10
			data := bc.data
			out := make([]byte, 0, 64<<10)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				dec := dialects[bc.api].NewDecoder()
				f, err := dialects[bc.api].NewCallFilter(allowAll, filterRefusal)
				if err != nil {
					b.Fatal(err)
				}
				fn := func(ev *sse.Event) error {
					dec.Decode(ev)
					out = f.AppendEvent(out[:0], *ev)
					return nil
				}
				r := sse.NewReader(0)
				for off := 0; off < len(data); off += read {
					if err := r.Feed(data[off:min(off+read, len(data))], fn); err != nil {
						b.Fatal(err)
					}
				}
				if err := r.Finish(fn); err != nil {
					b.Fatal(err)
				}
				if res := dec.Finish(); !res.Done || len(res.ToolCalls) == 0 {
					b.Fatalf("reply not decoded whole: done %v, %d calls", res.Done, len(res.ToolCalls))
				}
			}
		})
	}
}
