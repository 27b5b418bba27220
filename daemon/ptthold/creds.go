package ptthold

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// asCaller runs functions on one OS thread that holds the caller's
// credentials (uid, gid, no supplementary groups, no capabilities): the
// counters a user asks for are opened there, so perf_event_open's own
// ptrace-access check applies to the user (a non-dumpable process, or one
// holding capabilities the user lacks, is refused by the kernel) and
// perf_event_paranoid too. The descriptors it opens are the agent's like
// any others; only the opening is the user's.
type asCaller struct {
	mu      sync.Mutex // held while a request runs; stop waits for it
	reqs    chan func()
	stopped bool
}

// errStopped: the holder was stopped (ptt off); nothing is opened any more.
var errStopped = errors.New("ptt is off: nothing more is counted")

// newAsCaller starts the thread. For root, or when the agent itself runs
// as the caller (a user's own agent), no thread is needed (nil).
func newAsCaller(uid, gid int) (*asCaller, error) {
	if uid == 0 || os.Geteuid() != 0 {
		return nil, nil
	}
	a := &asCaller{reqs: make(chan func())}
	started := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine, and the
		// caller's credentials with it (Go never reuses it).
		runtime.LockOSThread()
		if err := dropTo(uid, gid); err != nil {
			started <- err
			return
		}
		started <- nil
		for fn := range a.reqs {
			fn()
		}
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("take the credentials of uid %d: %w", uid, err)
	}
	return a, nil
}

// dropTo changes the calling thread's credentials only (raw system calls:
// Go's wrappers change every thread of the process).
func dropTo(uid, gid int) error {
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
		return fmt.Errorf("setresgid: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
		return fmt.Errorf("setresuid: %w", e)
	}
	return nil
}

// do runs fn as the caller (directly when a is nil: root's holder) and
// waits for it. Once stopped it runs nothing: never as the agent instead.
func (a *asCaller) do(fn func()) error {
	if a == nil {
		fn()
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return errStopped
	}
	done := make(chan struct{})
	a.reqs <- func() { fn(); close(done) }
	<-done
	return nil
}

// stop ends the thread.
func (a *asCaller) stop() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.stopped {
		a.stopped = true
		close(a.reqs)
	}
}
