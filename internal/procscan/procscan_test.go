package procscan

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"perfinsp/format/trace"
)

func TestScanFindsThisProcess(t *testing.T) {
	exe, _ := os.Executable()
	pid := uint64(os.Getpid())
	var proc, seg, file bool
	var lastExe uint64
	var st unix.Stat_t
	if err := unix.Stat(exe, &st); err != nil {
		t.Fatal(err)
	}
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
				lastExe = f[1]
			}
		case trace.MTEFile:
			if f[1] == lastExe {
				file = f[2] == uint64(unix.Major(st.Dev)) && f[3] == uint64(unix.Minor(st.Dev)) && f[4] == st.Ino
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !proc || !seg || threads < 2 {
		t.Fatalf("process %v (ppid), executable segment %v, %d threads", proc, seg, threads)
	}
	if !file {
		t.Fatalf("no MTE_FILE after the executable's segment with its device and inode (%d:%d %d)", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	}
}
