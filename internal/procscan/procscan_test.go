package procscan

import (
	"os"
	"testing"

	"perfinsp/format/trace"
)

func TestScanFindsThisProcess(t *testing.T) {
	exe, _ := os.Executable()
	pid := uint64(os.Getpid())
	var proc, seg bool
	threads := 0
	err := Scan(5, func(minor uint32, f []uint64, s string) {
		if f[0] != pid {
			return
		}
		switch minor {
		case trace.MTEProcess:
			proc = f[1] == uint64(os.Getppid())
		case trace.MTEThreadName:
			threads++
		case trace.MTESegment:
			if s == exe && f[4]&4 != 0 && f[2] > 0 {
				seg = true
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !proc || !seg || threads < 2 {
		t.Fatalf("process %v (ppid), executable segment %v, %d threads", proc, seg, threads)
	}
}
