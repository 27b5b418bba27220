package ptthold

import (
	"github.com/vishvananda/netlink"
)

// procMonitor follows task creation through the netlink process connector
// (fork and clone events, threads included), so a new thread is counted
// from its first milliseconds instead of at the next /proc rescan. It
// needs CAP_NET_ADMIN: the root agent has it, a user's own agent does not.
type procMonitor struct {
	done chan struct{}
}

func startProcMonitor(newTask func(pid, tid int)) (*procMonitor, error) {
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
				if f, ok := ev.Msg.(*netlink.ForkProcEvent); ok {
					newTask(int(f.ChildTgid), int(f.ChildPid))
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
