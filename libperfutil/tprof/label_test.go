package tprof

import "testing"

// A thread no record named is labelled with its process's name (a new
// thread starts with its creator's comm), not "tid".
func TestThreadLabelFallsBackToProcessName(t *testing.T) {
	rep := &Report{
		ProcName: map[uint32]string{0x10: "xz"},
		ThreadNm: map[[2]uint32]string{{0x10, 0x11}: "", {0x10, 0x12}: "worker"},
	}
	for tid, want := range map[uint32]string{0x11: "xz_11", 0x12: "worker_12", 0x13: "xz_13"} {
		if got := rep.ThreadLabel(0x10, tid); got != want {
			t.Fatalf("thread %#x: %q, want %q", tid, got, want)
		}
	}
	if got := rep.ThreadLabel(0x20, 0x21); got != "tid_21" {
		t.Fatalf("thread of an unnamed process: %q", got)
	}
}
