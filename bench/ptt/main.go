// Command ptt-bench prints, in one run and side by side, the cost of one
// read of the calling thread's task-clock: the PTT mapped read of each
// backend, the perf read() system call on the same counter, and
// clock_gettime(CLOCK_THREAD_CPUTIME_ID). Run by bench/ptt/run.sh.
package main

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/ptt"
)

func main() {
	if err := ptt.Init("task-clock"); err != nil {
		fmt.Fprintln(os.Stderr, "ptt-bench:", err)
		os.Exit(1)
	}
	defer ptt.Terminate()
	var sink uint64
	var fail error
	bench := func(f func(t *ptt.Thread, fd int) error) float64 {
		r := testing.Benchmark(func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			t, err := ptt.CurrentThread()
			if err != nil {
				fail = err
				b.SkipNow()
			}
			fd := t.CounterFD(0)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := f(t, fd); err != nil {
					fail = err
					b.FailNow()
				}
			}
		})
		return float64(r.T.Nanoseconds()) / float64(r.N)
	}
	mapped := bench(func(t *ptt.Thread, _ int) error {
		v, err := t.Read1()
		sink += v
		return err
	})
	sys := bench(func(_ *ptt.Thread, fd int) error {
		v, err := ptt.ReadCounter(fd)
		sink += v
		return err
	})
	clk := bench(func(*ptt.Thread, int) error {
		var ts unix.Timespec
		err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
		sink += uint64(ts.Nsec)
		return err
	})
	if fail != nil {
		fmt.Fprintln(os.Stderr, "ptt-bench:", fail)
		os.Exit(1)
	}
	fmt.Printf("Go ns per read of the calling thread's task-clock (%s/%s, %d CPUs):\n", runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	fmt.Printf("  %-50s %8s\n", "method", "ns/read")
	fmt.Printf("  %-50s %s\n", "PTT mapped read, kmod backend", "not available: "+ptt.KmodStatus().Why)
	fmt.Printf("  %-50s %8.1f  (%.3fx read(); target <= 0.1x)\n", "PTT mapped read, daemon backend (Thread.Read1)", mapped, mapped/sys)
	fmt.Printf("  %-50s %8.1f\n", "perf read() system call, same counter", sys)
	fmt.Printf("  %-50s %8.1f\n", "clock_gettime(CLOCK_THREAD_CPUTIME_ID)", clk)
	_ = sink
}
