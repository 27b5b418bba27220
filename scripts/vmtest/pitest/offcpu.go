package main

// pitest offcpu: the scheduler records of the module (swtrace enable
// dispatch callstack): the bundled waits example (examples/waits.c) runs
// under the module's trace; its sleeper (10 x nanosleep of 100 ms) and
// its pipe reader (20 reads of a pipe fed every 50 ms) must have their
// wake-ups recorded (WAKEUP) and, in post's off-CPU profile, their waits
// under the stack they waited in (the user frames of the waiting function,
// the kernel frames of the wait) for the time the program measured around
// the calls with its own clock, within a few %.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	"perfinsp/libperfutil/control"
)

const offcpuWaits = "/bin/waits"

// offcpuTol is the tolerance of the off-CPU time of a thread's waits
// against the program's clock. The program's figure bounds the waits from
// above; less the CPU time the thread ran within them it bounds them from
// below, and the tolerance is room for the trace's clock (the TSC, whose
// rate the guest calibrated at boot) running a few % off the guest's
// clock under TCG beside a busy host.
const offcpuTol = 0.05

// offcpuRole is one line of the waits example's own account.
type offcpuRole struct {
	tid, count int
	ns, cpu    float64 // the waits' time, and the CPU time run within them
}

// offcpuRun traces the waits example with dispatch and call stacks into
// file and returns its pid and its account by role.
func offcpuRun(dir, file string) (int, map[string]offcpuRole, error) {
	f, err := control.Open("kmod")
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	_ = f.Free()
	if err := f.SetMode(control.ModeNormal, ""); err != nil {
		return 0, nil, err
	}
	if err := f.Init(control.Config{TraceBufSize: 8 << 20, MTEBufSize: 512 << 10}); err != nil {
		return 0, nil, err
	}
	st, err := f.Info()
	if err != nil {
		return 0, nil, err
	}
	if err := f.Disable(st.Enabled); err != nil {
		return 0, nil, err
	}
	if err := f.Enable([]uint16{trace.MajorDispatch, trace.MajorUnwind}); err != nil {
		return 0, nil, err
	}
	if err := f.On(); err != nil {
		return 0, nil, err
	}
	c := exec.Command(offcpuWaits, dir)
	c.Stderr = os.Stderr
	out, err := c.Output()
	if offErr := f.Off(); err == nil {
		err = offErr
	}
	if err != nil {
		return 0, nil, fmt.Errorf("waits: %w", err)
	}
	roles := map[string]offcpuRole{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fs := strings.Fields(l)
		if len(fs) != 5 {
			continue
		}
		var r offcpuRole
		r.tid, _ = strconv.Atoi(fs[1])
		r.count, _ = strconv.Atoi(fs[2])
		r.ns, _ = strconv.ParseFloat(fs[3], 64)
		r.cpu, _ = strconv.ParseFloat(fs[4], 64)
		roles[fs[0]] = r
	}
	if roles["sleeper"].count != 10 || roles["reader"].count != 20 {
		return 0, nil, fmt.Errorf("waits printed %q", out)
	}
	return c.Process.Pid, roles, f.Get(file)
}

// offcpuSaveEnabled returns a function that enables again the record
// types enabled now, and only them (the tests after this one expect the
// module's defaults).
func offcpuSaveEnabled() (func(), error) {
	f, err := control.Open("kmod")
	if err != nil {
		return nil, err
	}
	st, err := f.Info()
	f.Close()
	if err != nil {
		return nil, err
	}
	return func() {
		f, err := control.Open("kmod")
		if err != nil {
			return
		}
		defer f.Close()
		if now, err := f.Info(); err == nil {
			_ = f.Disable(now.Enabled)
		}
		_ = f.Enable(st.Enabled)
	}, nil
}

// offcpuCounts are what offcpuRecords counted.
type offcpuCounts struct {
	dispatches, wakeups, newWakeups, stacks, withUser int
	wakeupsOf                                         map[int]int // by woken tid
	waitsOf                                           map[int]int // switch-outs to wait, by tid
	userOf                                            map[int]int // UNWIND_SWITCH with user frames, by tid
}

// offcpuRecords checks file's scheduler records: every UNWIND_SWITCH
// follows, on its CPU, the DISPATCH of the same thread leaving to wait,
// with the same time stamp; its kernel PCs come first and are kernel
// addresses, its user PCs user addresses. It counts the WAKEUP records
// (by woken thread, and those of new threads of pid).
func offcpuRecords(file string, pid int) (offcpuCounts, error) {
	c := offcpuCounts{wakeupsOf: map[int]int{}, waitsOf: map[int]int{}, userOf: map[int]int{}}
	f, err := nrm2.Open(file)
	if err != nil {
		return c, err
	}
	prev := map[int]trace.Record{}
	err = f.Records(func(r *trace.Record) error {
		if r.MTE || r.Major == trace.MajorSys && r.Minor == trace.SysTimeHigh {
			return nil
		}
		p, had := prev[r.CPU]
		prev[r.CPU] = trace.Record{Major: r.Major, Minor: r.Minor, Time: r.Time, Fixed: append([]uint64(nil), r.Fixed...)}
		switch {
		case r.Major == trace.MajorDispatch && r.Minor == trace.DispatchSwitch:
			c.dispatches++
			if r.Field(4)&trace.StateMask != 0 {
				c.waitsOf[int(r.Field(1))]++
			}
		case r.Major == trace.MajorDispatch && r.Minor == trace.DispatchWakeup:
			c.wakeups++
			c.wakeupsOf[int(r.Field(1))]++
			if r.Field(5)&trace.WakeupNew != 0 && int(r.Field(0)) == pid {
				c.newWakeups++
			}
			if r.Field(2) >= uint64(f.Header.NCPUs) {
				return fmt.Errorf("WAKEUP of %d to CPU %d of %d", r.Field(1), r.Field(2), f.Header.NCPUs)
			}
		case r.Major == trace.MajorUnwind && r.Minor == trace.UnwindSwitch:
			c.stacks++
			if !had || p.Major != trace.MajorDispatch || p.Minor != trace.DispatchSwitch || p.Time != r.Time ||
				p.Fixed[1] != r.Field(1) || p.Fixed[4]&trace.StateMask == 0 {
				return fmt.Errorf("UNWIND_SWITCH of %d/%d on CPU %d at %d does not follow its thread's DISPATCH to wait (previous %+v)", r.Field(0), r.Field(1), r.CPU, r.Time, p)
			}
			if r.Layout != trace.LayoutBytes || len(r.Str)%8 != 0 || len(r.Str) == 0 {
				return fmt.Errorf("UNWIND_SWITCH with layout %d and %d bytes", r.Layout, len(r.Str))
			}
			k := int(r.Field(2) >> trace.UnwindKernShift)
			n := len(r.Str) / 8
			if k > n || k == 0 {
				return fmt.Errorf("UNWIND_SWITCH: %d kernel PCs of %d", k, n)
			}
			for i := 0; i < n; i++ {
				pc := leU64(r.Str[8*i:])
				if isKernelPC(pc) != (i < k) {
					return fmt.Errorf("UNWIND_SWITCH of %d: PC %d of %d (%#x): kernel address %v, the record counts %d kernel PCs", r.Field(1), i, n, pc, isKernelPC(pc), k)
				}
			}
			if n > k+1 {
				c.withUser++
				c.userOf[int(r.Field(1))]++
			}
		}
		return nil
	})
	return c, err
}

func leU64(s string) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(s[i])
	}
	return v
}

// offUnder sums the off-CPU ns of folded cells of thread tid in one of
// states whose frames contain each of frames.
func offUnder(cells map[string]int, tid int, states []string, frames ...string) float64 {
	var sum float64
	tag := "-" + strconv.Itoa(tid)
next:
	for l, n := range cells {
		fr := strings.Split(l, ";")
		if len(fr) < 3 || !strings.HasSuffix(fr[1], tag) {
			continue
		}
		ok := false
		for _, s := range states {
			ok = ok || fr[2] == "["+s+"]"
		}
		if !ok {
			continue
		}
		for _, want := range frames {
			found := false
			for _, x := range fr[3:] {
				found = found || strings.Contains(x, want)
			}
			if !found {
				continue next
			}
		}
		sum += float64(n)
	}
	return sum
}

func offcpu() error {
	for _, p := range []string{stackPost, offcpuWaits} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s is not in the image: %w", p, err)
		}
	}
	dir, err := os.MkdirTemp("", "offcpu")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	defer stacksReset()
	restore, err := offcpuSaveEnabled()
	if err != nil {
		return err
	}
	defer restore()
	file := filepath.Join(dir, "waits.nrm2")
	pid, roles, err := offcpuRun(dir, file)
	if err != nil {
		return err
	}
	c, err := offcpuRecords(file, pid)
	if err != nil {
		return err
	}
	sl, rd := roles["sleeper"], roles["reader"]
	fmt.Printf("offcpu: %d DISPATCH, %d WAKEUP (%d of new threads of waits), %d UNWIND_SWITCH (%d with user frames); sleeper woken %d times for %d waits, reader %d for %d\n",
		c.dispatches, c.wakeups, c.newWakeups, c.stacks, c.withUser, c.wakeupsOf[sl.tid], c.waitsOf[sl.tid], c.wakeupsOf[rd.tid], c.waitsOf[rd.tid])
	// Every wait ends with a wake-up. Each of the sleeper's sleeps waits;
	// a read waits only when the pipe is empty (a vCPU the host starves
	// can reach the read after the feeder's write), most of them here.
	switch {
	case c.waitsOf[sl.tid] < sl.count || c.waitsOf[rd.tid] < rd.count/2:
		return fmt.Errorf("waits: sleeper %d for %d sleeps, reader %d for %d reads", c.waitsOf[sl.tid], sl.count, c.waitsOf[rd.tid], rd.count)
	case c.wakeupsOf[sl.tid] < c.waitsOf[sl.tid] || c.wakeupsOf[rd.tid] < c.waitsOf[rd.tid]:
		return fmt.Errorf("wake-ups: sleeper %d for %d waits, reader %d for %d waits", c.wakeupsOf[sl.tid], c.waitsOf[sl.tid], c.wakeupsOf[rd.tid], c.waitsOf[rd.tid])
	case c.newWakeups < 8:
		return fmt.Errorf("%d WAKEUP records of new threads of waits, it creates 8", c.newWakeups)
	// The sleeper's sleeps and the reader's reads wait in system calls:
	// their stacks have user frames, one for each sleep and for at least
	// as many reads as the waits' floor above. (A thread's waits in the
	// kernel's own work, as at its exit, have none; their share of all
	// stacks grows with the host's load.)
	case c.stacks < sl.count+rd.count || c.userOf[sl.tid] < sl.count || c.userOf[rd.tid] < rd.count/2:
		return fmt.Errorf("%d UNWIND_SWITCH records, %d with user frames: the sleeper's %d of %d waits (%d sleeps), the reader's %d of %d (%d reads)",
			c.stacks, c.withUser, c.userOf[sl.tid], c.waitsOf[sl.tid], sl.count, c.userOf[rd.tid], c.waitsOf[rd.tid], rd.count)
	}
	tids := []string{}
	for _, r := range roles {
		tids = append(tids, strconv.Itoa(r.tid))
	}
	folded := filepath.Join(dir, "off.folded")
	b, err := exec.Command(stackPost, "-r", file, "-o", dir, "-sched", "--offcpu", folded, "--tid", strings.Join(tids, ",")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("post -sched --offcpu: %v: %s", err, b)
	}
	fmt.Printf("%s", b)
	if strings.Contains(string(b), "lost") {
		return fmt.Errorf("post says records were lost: %s", b)
	}
	cells, err := foldedNs(folded)
	if err != nil {
		return err
	}
	var sj struct {
		Threads []struct {
			TID  int `json:"tid"`
			Wake struct {
				Count int `json:"count"`
			} `json:"wakeup_latency"`
		} `json:"threads"`
	}
	if b, err = os.ReadFile(filepath.Join(dir, "sched.json")); err == nil {
		err = json.Unmarshal(b, &sj)
	}
	if err != nil {
		return fmt.Errorf("sched.json: %w", err)
	}
	woken := map[int]int{}
	for _, th := range sj.Threads {
		woken[th.TID] = th.Wake.Count
	}
	rq := func(s string) []string { return []string{s, "runqueue"} }
	checks := []struct {
		role   string
		got    float64
		detail string
	}{
		{"sleeper", offUnder(cells, sl.tid, rq("sleeping"), "sleeper", "sleep_timed", "nanosleep"), "sleeping+runqueue under sleeper;sleep_timed;...nanosleep"},
		{"reader", offUnder(cells, rd.tid, rq("sleeping"), "reader", "read_timed", "pipe_read"), "sleeping+runqueue under reader;read_timed;...pipe_read_[k]"},
	}
	for _, r := range []offcpuRole{sl, rd} {
		best, bn := "", 0
		for l, n := range cells {
			if strings.Contains(l, "-"+strconv.Itoa(r.tid)+";") && n > bn {
				best, bn = l, n
			}
		}
		fmt.Printf("offcpu: thread %d's longest wait stack: %s %d\n", r.tid, best, bn)
	}
	var failed []string
	// The program times each wait around its call and the CPU time it ran
	// within it: the off-CPU time is at most the first and at least the
	// difference (a vCPU the host starves makes the system call's own path
	// take milliseconds of the guest's clock, on the CPU), less the
	// tolerance.
	fmt.Printf("offcpu: %-8s %6s %9s %12s %12s %12s %8s\n", "role", "waits", "wake-ups", "program ms", "of it CPU", "post ms", "diff %")
	for _, ch := range checks {
		r := roles[ch.role]
		off := r.ns - r.cpu
		d := 100 * (ch.got - off) / off
		fmt.Printf("offcpu: %-8s %6d %9d %12.2f %12.2f %12.2f %8.2f\n", ch.role, r.count, woken[r.tid], r.ns/1e6, r.cpu/1e6, ch.got/1e6, d)
		if ch.got > r.ns || ch.got < (1-offcpuTol)*off {
			failed = append(failed, fmt.Sprintf("%s (tid %d): %.2f ms off-CPU %s, the program timed %.2f ms in %d waits, %.2f ms of it on the CPU (want %.0f %% below the difference to the whole)",
				ch.role, r.tid, ch.got/1e6, ch.detail, r.ns/1e6, r.count, r.cpu/1e6, 100*offcpuTol))
		}
		// (the trace's waits: a read that finds the pipe already
		// written does not block, so the program's reads may be more)
		if woken[r.tid] < c.waitsOf[r.tid] {
			failed = append(failed, fmt.Sprintf("%s: sched.json has %d wake-ups for %d waits in the trace", ch.role, woken[r.tid], c.waitsOf[r.tid]))
		}
	}
	// nanosleep never returns early: the sleeps alone are at least 10 x
	// 100 ms by the guest's clock; the trace's time stamps are the TSC's,
	// whose rate the guest calibrated at boot, under TCG beside a busy
	// host a few % off that clock: the same tolerance as above
	if s := offUnder(cells, sl.tid, []string{"sleeping"}, "sleep_timed"); s < (1-offcpuTol)*1e9 {
		failed = append(failed, fmt.Sprintf("sleeper: %.2f ms sleeping under sleep_timed, want at least %.0f (10 x 100 ms, less %.0f %%)", s/1e6, (1-offcpuTol)*1e3, 100*offcpuTol))
	}
	if len(failed) > 0 {
		for l, n := range cells {
			if strings.Contains(l, "-"+strconv.Itoa(sl.tid)+";") || strings.Contains(l, "-"+strconv.Itoa(rd.tid)+";") {
				fmt.Printf("  %s %d\n", l, n)
			}
		}
		return errors.New(strings.Join(failed, "; "))
	}
	fmt.Println("offcpu: ok")
	return nil
}

// foldedNs reads a folded file: ns by frames.
func foldedNs(path string) (map[string]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		i := strings.LastIndexByte(l, ' ')
		n, err := strconv.Atoi(l[i+1:])
		if i < 0 || err != nil {
			return nil, fmt.Errorf("folded line %q", l)
		}
		m[l[:i]] += n
	}
	return m, nil
}

// schedBytes prints the scheduler records of file's trace buffers and
// their bytes (TIME_HIGH records included, as they are written among them),
// per DISPATCH: what a switch costs in trace space.
func schedBytes(file string) error {
	f, err := nrm2.Open(file)
	if err != nil {
		return err
	}
	var disp, wake, stacks, bytes int
	err = f.RecordsOf(nrm2.ChunkTrace, func(r *trace.Record) error {
		sched := r.Major == trace.MajorDispatch || r.Major == trace.MajorUnwind && r.Minor == trace.UnwindSwitch
		if !sched && !(r.Major == trace.MajorSys && r.Minor == trace.SysTimeHigh) {
			return nil
		}
		b, err := trace.Encode(nil, r.Major, r.Minor, r.Layout, r.Time, r.Fixed, r.Str)
		if err != nil {
			return err
		}
		bytes += len(b)
		switch {
		case r.Major == trace.MajorDispatch && r.Minor == trace.DispatchSwitch:
			disp++
		case r.Major == trace.MajorDispatch && r.Minor == trace.DispatchWakeup:
			wake++
		case sched:
			stacks++
		}
		return nil
	})
	if err != nil {
		return err
	}
	if disp == 0 {
		return errors.New("no DISPATCH record")
	}
	fmt.Printf("%d DISPATCH, %d WAKEUP, %d UNWIND_SWITCH: %d bytes, %.1f per DISPATCH\n", disp, wake, stacks, bytes, float64(bytes)/float64(disp))
	return nil
}
