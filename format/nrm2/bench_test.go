package nrm2

import (
	"testing"

	"perfinsp/format/trace"
)

// BenchmarkRecords parses and merges a trace of 1M ticks on 2 CPUs (the
// reader's share of a 1M-sample post run).
func BenchmarkRecords(b *testing.B) { benchRecords(b, Options{}) }

// BenchmarkRecordsSalvage is BenchmarkRecords as post reads: salvaging.
func BenchmarkRecordsSalvage(b *testing.B) { benchRecords(b, Options{Salvage: true}) }

func benchRecords(b *testing.B, opt Options) {
	tr := buildTrace(b, 2, 500_000, 17<<20)
	b.SetBytes(int64(len(tr.data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f, err := ParseWith(tr.data, opt)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		if err := f.Records(func(r *trace.Record) error {
			if r.Major == trace.MajorTprof {
				n++
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		if n != 1_000_000 {
			b.Fatalf("%d ticks, want 1000000", n)
		}
	}
}
