package abigen

import (
	"testing"

	"perfinsp/internal/testenv"
)

// The tests keep HOME and the caches in a temporary directory of their own.
func TestMain(m *testing.M) { testenv.Main(m) }

func TestGoName(t *testing.T) {
	for c, want := range map[string]string{
		"seg_size": "SegSize", "data_offset": "DataOffset", "ncpus": "NCPUs", "nr_cpus": "NrCPUs",
		"trace_nseg": "TraceNSeg", "mte_used": "MTEUsed", "clock_id": "ClockID", "abi": "ABI",
		"irq_tsc": "IRQTSC", "btf_ignored": "BTFIgnored", "reserved2": "Reserved2", "a": "A",
		"Pids_from": "PidsFrom",
	} {
		if got := GoName(c); got != want {
			t.Errorf("GoName(%q) = %q, want %q", c, got, want)
		}
	}
}
