package ptthold

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"perfinsp/libperfutil/kmodbackend"
	"perfinsp/libperfutil/ptt"
)

// The holder on the pitrace module: the client's /dev/pitrace file with the
// chosen metrics (PTT_INIT) and a module-kept work area for every thread of
// the target (PTT_WATCH). The module updates the areas at every dispatch
// and interrupt of the threads, with interrupts factored out into per-CPU
// buckets; the holder only reads snapshots (PTT_READ, PTT_STATUS).

func (h *holder) openModule(dev *os.File) error {
	if err := kmodbackend.IsDevice(dev); err != nil {
		return err
	}
	if err := kmodbackend.CheckABI(dev.Fd()); err != nil {
		return err
	}
	fd := int(dev.Fd())
	hooks, err := kmodbackend.PttHooks(fd)
	if err != nil {
		return fmt.Errorf("the loaded pitrace module has no PTT support: %w", err)
	}
	if err := ptt.ModuleInit(fd, h.metrics); err != nil {
		return err
	}
	h.kfile, h.kfd, h.hooks, h.watched = dev, fd, hooks, map[int]bool{}
	return nil
}

// watchModule has the module keep a work area for a thread; a thread gone
// meanwhile (ESRCH) is skipped. With strict, a failure on the target
// process is returned. Called with h.mu held.
func (h *holder) watchModule(pid, tid int, strict bool) error {
	var err error
	// As the caller: the module's own permission check sees the caller's
	// credentials, not the agent's.
	if derr := h.as.do(func() { err = kmodbackend.PttWatch(h.kfd, tid) }); derr != nil {
		return nil
	}
	switch {
	case err == nil, errors.Is(err, syscall.EEXIST):
		h.watched[tid] = true
		return nil
	case errors.Is(err, syscall.ESRCH):
		return nil
	case errors.Is(err, syscall.EBUSY):
		// The module keeps one area per thread: the thread maps its own
		// (it uses PTT itself) or another holder watches it. Not retried
		// while the thread lives.
		h.watched[tid] = true
		h.note(tid, errors.New("already has a PTT work area (its own, or another ptt's): not counted here"))
		return nil
	case errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES):
		err = fmt.Errorf("thread %d of pid %d: permission denied: only root or a user who may ptrace the thread can watch it: %w", tid, pid, err)
	case errors.Is(err, syscall.ENOTTY) || errors.Is(err, syscall.EINVAL):
		err = fmt.Errorf("thread %d: the loaded pitrace module refuses PTT_WATCH (an older module? rebuild and reload kmod/pitrace.ko): %w", tid, err)
	}
	if strict && h.pid > 0 {
		return err
	}
	h.note(tid, err)
	return nil
}

// timeMetric is the index of the metric InterruptTime reports (tsc, else
// cpu-clock), -1 if none is a time.
func timeMetric(ms []ptt.Metric) int {
	for _, want := range []string{"tsc", "cpu-clock"} {
		for i, m := range ms {
			if m.Name == want {
				return i
			}
		}
	}
	return -1
}

// dumpModule builds the dump from PTT_READ and PTT_STATUS. Called with
// h.mu held.
func (h *holder) dumpModule() *ptt.Dump {
	d := &ptt.Dump{Backend: "kmod", Started: h.started, Note: noteKmod, NewThreads: h.newThr, Errors: append([]string(nil), h.errs...)}
	for _, m := range h.metrics {
		d.Metrics = append(d.Metrics, m.Name)
	}
	d.Target = h.target()
	d.Guarantees = ptt.ModuleGuarantees(h.metrics, h.hooks)
	d.Guarantees.RetryDetects = "n/a: the holder reads a snapshot the module takes under each area's sequence (PTT_READ)"
	d.Guarantees.Notes = append(d.Guarantees.Notes, "values are each thread's work area at the snapshot (PTT_READ); dispatches and interrupts are the module's exact counts")
	snap, err := kmodbackend.PttRead(h.kfd)
	if err != nil {
		d.Errors = append(d.Errors, err.Error())
	}
	ti := timeMetric(h.metrics)
	for _, t := range snap {
		a := &t.Area
		td := ptt.ThreadDump{Pid: t.Pid, Tid: t.Tid, Name: t.Comm, Values: map[string]uint64{}, InterruptValues: map[string]uint64{},
			Running: t.Running, Exited: a.Dead != 0 || t.Tid == 0}
		if !td.Exited {
			if n := comm(t.Pid, t.Tid); n != "" {
				td.Name = n
			}
		}
		for i, m := range h.metrics {
			td.Values[m.Name] = a.Accum[i]
			td.InterruptValues[m.Name] = a.IntrTime[i]
		}
		disp, intr := uint64(a.Dispatches), uint64(a.Interrupts)
		td.Dispatches, td.Interrupts = &disp, &intr
		if ti >= 0 {
			it := a.IntrTime[ti]
			td.InterruptTime = &it
		}
		d.Threads = append(d.Threads, td)
	}
	SortThreads(d.Threads)
	st, err := kmodbackend.PttStatus(h.kfd)
	if err != nil {
		d.Errors = append(d.Errors, err.Error())
		d.CPUNote = "PTT_STATUS failed: " + err.Error()
		return d
	}
	d.CPUs = []ptt.CPUBucket{}
	for _, b := range st.CPUs {
		cb := ptt.CPUBucket{CPU: b.CPU, Interrupts: b.Interrupts, TSC: b.TSC, Values: map[string]uint64{}}
		for i, m := range h.metrics {
			cb.Values[m.Name] = b.Val[i]
		}
		d.CPUs = append(d.CPUs, cb)
	}
	d.CPUNote = fmt.Sprintf("interrupt hooks attached: %#x; %d areas updated by the module (all files)", st.Hooks, st.NAreas)
	return d
}
