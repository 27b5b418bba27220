package ptthold

import (
	"github.com/vishvananda/netlink"
)

// procMonitor follows task creation through the netlink process connector
// (fork and clone events, threads included), so a new thread is counted
// from its first milliseconds instead of at the next /proc rescan, and an
// exited thread's counters are closed at once. It
// needs CAP_NET_ADMIN: the root agent has it, a user's own agent does not.
type procMonitor struct {
	done chan struct{}
}

func startProcMonitor(newTask, exited func(pid, tid int)) (*procMonitor, error) {
	ch := make(chan netlink.ProcEvent, 4096)
	errc := make(chan error, 1)
	done := make(chan struct{})
	if err := netlink.ProcEventMonitor(ch, done, errc); err != nil {
		return nil, err
	}
	go func() {
		for {
			select {
			case ev, ok := <-ch:
				if !ok {
					return
				}
				switch m := ev.Msg.(type) {
				case *netlink.ForkProcEvent:
					newTask(int(m.ChildTgid), int(m.ChildPid))
				case *netlink.ExitProcEvent:
					exited(int(m.ProcessTgid), int(m.ProcessPid))
				}
			case <-errc:
				return // the rescan keeps finding new threads
			case <-done:
				return
			}
		}
	}()
	return &procMonitor{done: done}, nil
}

func (m *procMonitor) stop() { close(m.done) }
