package itrace

import (
	"errors"

	"golang.org/x/sys/unix"
)

// letGo detaches the threads seized so far when a session is refused at
// attach. A seized thread stops for its PTRACE_INTERRUPT when the kernel
// gets to it, which on a busy machine can be after the refusal: a detach
// before that stop fails (ESRCH), and the thread would stop for good,
// still traced (a SIGKILL then leaves it a zombie its tracer never
// reaps). So each thread's stop is waited for first; a thread that
// exits meanwhile needs nothing more.
func letGo(tids []int) {
	for _, tid := range tids {
		for {
			err := unix.PtraceDetach(tid)
			if !errors.Is(err, unix.ESRCH) {
				break // detached (or not ours to detach)
			}
			var ws unix.WaitStatus
			if _, err := unix.Wait4(tid, &ws, unix.WALL, nil); err != nil && !errors.Is(err, unix.EINTR) {
				break // gone
			}
			if ws.Exited() || ws.Signaled() {
				break
			}
		}
	}
}
