package events

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Spec says what Measure counts: events on a process (PID), on every CPU
// (All), or on a command it starts (Cmd), for mpevt and cpi.
type Spec struct {
	Events   []Event
	PID      int           // count the threads of this process (and what they create)
	All      bool          // count every CPU (per-CPU counters)
	Cmd      []string      // start this command and count it and its children
	Interval time.Duration // report every Interval (0: only at the end)
	Duration time.Duration // stop after this long (0: when the target ends, or at SIGINT/SIGTERM)
	Stdin    *os.File      // the command's standard files (nil: the caller's)
	Stdout   *os.File
	Stderr   *os.File
}

// Unit is one counted thread or CPU.
type Unit struct {
	TID  int    // thread (per-thread counting), else -1
	CPU  int    // CPU (All), else -1
	Comm string // thread name at the start
}

// Label names the unit: "tid 1234 (name)" or "cpu 3".
func (u Unit) Label() string {
	if u.CPU >= 0 {
		return "cpu " + strconv.Itoa(u.CPU)
	}
	if u.Comm != "" {
		return fmt.Sprintf("tid %d (%s)", u.TID, u.Comm)
	}
	return "tid " + strconv.Itoa(u.TID)
}

// Sample is one report: cumulative readings since the start, per event and
// unit, and the time since the start.
type Sample struct {
	Elapsed  time.Duration
	Final    bool
	Units    []Unit
	Readings [][]Reading // [event][unit]
	// ExitCode is the command's exit status in the final sample (Cmd).
	ExitCode int
}

// Total sums an event's scaled readings over all units.
func (s Sample) Total(ev int) uint64 {
	var t uint64
	for _, r := range s.Readings[ev] {
		t += r.Scaled()
	}
	return t
}

// Multiplexed reports whether any of an event's counters ran only part of
// the time (the total is then scaled, as perf stat does).
func (s Sample) Multiplexed(ev int) bool {
	for _, r := range s.Readings[ev] {
		if r.Running < r.Enabled {
			return true
		}
	}
	return false
}

// counters: fds[event][unit].
type counters struct {
	units []Unit
	fds   [][]int
}

func (c *counters) close() {
	for _, row := range c.fds {
		for _, fd := range row {
			if fd >= 0 {
				_ = unix.Close(fd)
			}
		}
	}
}

func (c *counters) read() ([][]Reading, error) {
	out := make([][]Reading, len(c.fds))
	for i, row := range c.fds {
		out[i] = make([]Reading, len(row))
		for j, fd := range row {
			r, err := Read(fd)
			if err != nil {
				return nil, err
			}
			out[i][j] = r
		}
	}
	return out, nil
}

// ThreadsOf lists the threads of process pid with their names.
func ThreadsOf(pid int) ([]Unit, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	ents, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("process %d does not exist", pid)
		}
		return nil, fmt.Errorf("list the threads of process %d: %w", pid, err)
	}
	var out []Unit
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile(dir + "/" + e.Name() + "/comm")
		out = append(out, Unit{TID: tid, CPU: -1, Comm: strings.TrimSpace(string(comm))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TID < out[j].TID })
	return out, nil
}

func openAll(evs []Event, units []Unit, inherit bool) (*counters, error) {
	c := &counters{units: units}
	for _, e := range evs {
		row := make([]int, 0, len(units))
		for _, u := range units {
			pid, cpu := u.TID, -1
			if u.CPU >= 0 {
				pid, cpu = -1, u.CPU
			}
			fd, err := Open(e, pid, cpu, OpenOpts{Inherit: inherit && u.CPU < 0})
			if err != nil {
				if errors.Is(err, unix.ESRCH) && u.CPU < 0 {
					row = append(row, -1) // the thread exited meanwhile
					continue
				}
				c.fds = append(c.fds, row)
				c.close()
				return nil, err
			}
			row = append(row, fd)
		}
		c.fds = append(c.fds, row)
	}
	// Threads that exited between the listing and the opens.
	keep := make([]int, 0, len(units))
	for j := range units {
		if len(c.fds) > 0 && c.fds[0][j] >= 0 {
			keep = append(keep, j)
		}
	}
	if len(keep) != len(units) {
		nc := &counters{}
		for _, j := range keep {
			nc.units = append(nc.units, units[j])
		}
		for _, row := range c.fds {
			nrow := make([]int, 0, len(keep))
			for j, fd := range row {
				if c.fds[0][j] >= 0 {
					nrow = append(nrow, fd)
				} else if fd >= 0 {
					_ = unix.Close(fd)
				}
			}
			nc.fds = append(nc.fds, nrow)
		}
		c = nc
	}
	if len(c.units) == 0 {
		c.close()
		return nil, errors.New("every thread of the target exited before it could be counted")
	}
	return c, nil
}

// startStopped starts cmd traced so that it stops right after its exec,
// and returns it; the caller opens counters and then calls release. The
// calling goroutine stays locked to its thread until release (ptrace
// requests must come from the tracing thread).
func startStopped(argv []string, spec Spec) (*exec.Cmd, func() error, error) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, nil, fmt.Errorf("command %q: %w", argv[0], err)
	}
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if spec.Stdin != nil {
		cmd.Stdin = spec.Stdin
	}
	if spec.Stdout != nil {
		cmd.Stdout = spec.Stdout
	}
	if spec.Stderr != nil {
		cmd.Stderr = spec.Stderr
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	runtime.LockOSThread()
	if err := cmd.Start(); err != nil {
		runtime.UnlockOSThread()
		return nil, nil, fmt.Errorf("start %q: %w", argv[0], err)
	}
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(cmd.Process.Pid, &ws, unix.WALL, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			runtime.UnlockOSThread()
			return nil, nil, fmt.Errorf("wait for %q to start: %w", argv[0], err)
		}
		break
	}
	if !ws.Stopped() {
		runtime.UnlockOSThread()
		return nil, nil, fmt.Errorf("command %q ended before it could be counted (status %#x)", argv[0], uint32(ws))
	}
	release := func() error {
		defer runtime.UnlockOSThread()
		if err := unix.PtraceDetach(cmd.Process.Pid); err != nil {
			return fmt.Errorf("let %q run (ptrace detach): %w", argv[0], err)
		}
		return nil
	}
	return cmd, release, nil
}

// signalGrace is how long Measure waits for a command to end after
// SIGINT or SIGTERM before passing the signal on, and again before it
// ends the count (and sends SIGTERM).
var signalGrace = 2 * time.Second

// Measure counts spec.Events and calls each at every interval and once at
// the end (Final). It returns when the target ends (the process or the
// command exits), after Duration, or at SIGINT/SIGTERM: with a command,
// when the command ends of it (Ctrl-C reaches both; the signal is passed
// on after signalGrace), at the latest twice signalGrace after it, or at
// a second signal.
func Measure(spec Spec, each func(Sample) error) error {
	if len(spec.Events) == 0 {
		return errors.New("no events to count")
	}
	n := 0
	if spec.PID > 0 {
		n++
	}
	if spec.All {
		n++
	}
	if len(spec.Cmd) > 0 {
		n++
	}
	if n == 0 {
		return errors.New("nothing to count: give -p PID, -a (every CPU) or a command after --")
	}
	if n > 1 && !(spec.All && len(spec.Cmd) > 0) {
		return errors.New("give one of -p PID, -a or a command (-a with a command counts every CPU while the command runs)")
	}
	var (
		c    *counters
		err  error
		cmd  *exec.Cmd
		done = make(chan int, 1) // the target ended: exit code
	)
	switch {
	case spec.All:
		cpus, err := OnlineCPUs()
		if err != nil {
			return err
		}
		units := make([]Unit, len(cpus))
		for i, cp := range cpus {
			units[i] = Unit{TID: -1, CPU: cp}
		}
		if c, err = openAll(spec.Events, units, false); err != nil {
			return err
		}
	case spec.PID > 0:
		units, err := ThreadsOf(spec.PID)
		if err != nil {
			return err
		}
		if c, err = openAll(spec.Events, units, true); err != nil {
			return err
		}
		pidfd, err := unix.PidfdOpen(spec.PID, 0)
		if err != nil {
			c.close()
			return fmt.Errorf("watch process %d: %w", spec.PID, err)
		}
		go func() {
			defer unix.Close(pidfd)
			fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
			for {
				if _, err := unix.Poll(fds, -1); err == nil || !errors.Is(err, unix.EINTR) {
					done <- 0
					return
				}
			}
		}()
	}
	if len(spec.Cmd) > 0 {
		var release func() error
		cmd, release, err = startStopped(spec.Cmd, spec)
		if err != nil {
			if c != nil {
				c.close()
			}
			return err
		}
		if c == nil {
			unit := Unit{TID: cmd.Process.Pid, CPU: -1, Comm: spec.Cmd[0]}
			if c, err = openAll(spec.Events, []Unit{unit}, true); err != nil {
				_ = cmd.Process.Kill()
				_ = release()
				_ = cmd.Wait()
				return err
			}
		}
		if err := release(); err != nil {
			_ = cmd.Process.Kill()
			c.close()
			return err
		}
		go func() {
			err := cmd.Wait()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
				if code < 0 {
					code = 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
				}
			}
			done <- code
		}()
	}
	defer c.close()

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	start := time.Now()
	var tick <-chan time.Time
	if spec.Interval > 0 {
		t := time.NewTicker(spec.Interval)
		defer t.Stop()
		tick = t.C
	}
	var stop <-chan time.Time
	if spec.Duration > 0 {
		stop = time.After(spec.Duration)
	}
	code, ended := 0, false
	var (
		caught os.Signal        // the first signal while the command runs
		grace  <-chan time.Time // its end, for a command the signal did not reach
	)
	for final := false; !final; {
		select {
		case <-tick:
		case code = <-done:
			final, ended = true, true
		case <-stop:
			final = true
		case s := <-sigs:
			if cmd != nil && caught == nil {
				// Ctrl-C at the terminal reaches the command too (our
				// process group): it ends in its own way, what it does
				// then is counted and its exit status kept. A signal
				// that was ours alone is passed on if the command has
				// not ended within signalGrace.
				caught, grace = s, time.After(signalGrace)
				continue
			}
			final = true // a second one: now
		case <-grace:
			grace = nil
			_ = cmd.Process.Signal(caught)
			stop = time.After(signalGrace) // then the end, and SIGTERM
			continue
		}
		rs, err := c.read()
		if err != nil {
			return err
		}
		if err := each(Sample{Elapsed: time.Since(start), Final: final, Units: c.units, Readings: rs, ExitCode: code}); err != nil {
			return err
		}
	}
	if cmd != nil && !ended {
		// stopped by -d or a signal while the command runs: let it finish
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-done
	}
	return nil
}
