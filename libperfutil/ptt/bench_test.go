package ptt

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkRead: ns per read of the calling thread's task-clock, the PTT
// mapped read of each backend next to perf read() on the same counter and
// clock_gettime(CLOCK_THREAD_CPUTIME_ID). bench/ptt/run.sh prints the same
// figures as one table.
func BenchmarkRead(b *testing.B) {
	b.Setenv(EnvBackend, "")
	if err := Init("task-clock"); err != nil {
		b.Fatal(err)
	}
	defer Terminate()
	thread := func(b *testing.B) *Thread {
		runtime.LockOSThread()
		t, err := CurrentThread()
		if err != nil {
			b.Fatal(err)
		}
		return t
	}
	b.Run("ptt-mapped-kmod", func(b *testing.B) {
		b.Skip("not available: " + KmodStatus().Why)
	})
	b.Run("ptt-mapped-daemon", func(b *testing.B) {
		t := thread(b)
		defer runtime.UnlockOSThread()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := t.Read1(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("perf-read-syscall", func(b *testing.B) {
		t := thread(b)
		defer runtime.UnlockOSThread()
		fd := t.CounterFD(0)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := ReadCounter(fd); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("clock_gettime-thread-cputime", func(b *testing.B) {
		var ts unix.Timespec
		for i := 0; i < b.N; i++ {
			if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
				b.Fatal(err)
			}
		}
	})
}
