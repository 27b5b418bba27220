package itrace

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/daemonclient"
	"perfinsp/libperfutil/kmodbackend"
)

// Step says how an ITrace takes its traps: StepAuto block-steps (BTF: a
// trap per taken branch) where the CPU honours it and, where it does not,
// breakpoint-steps (StepBreakpoint) where debug registers work, else
// single-steps; StepSingle always single-steps; StepVerify single-steps and
// also decodes every block as block-stepping would, counting disagreements
// (the check of the block decoder on a machine that ignores BTF). Both
// backends take it: the module as ITRACE_ON's step flags, pitraced's
// ptrace tracer as its stepping.
type Step string

// Step modes.
const (
	StepAuto   Step = ""
	StepSingle Step = "single"
	StepVerify Step = "verify"
	// StepBreakpoint runs straight-line code natively and stops before
	// each branch with a hardware breakpoint (the ptrace path; auto's
	// choice where BTF is ignored and debug registers work).
	StepBreakpoint Step = "breakpoint"
)

// Daemon ops of the no-module ITrace (pitraced registers them).
const (
	OpOn     = "itrace-on"     // OnArgs -> OnResult
	OpOff    = "itrace-off"    // OffArgs -> OffResult
	OpStatus = "itrace-status" // nothing -> StatusResult
)

// StatusResult is what the caller's sessions (root: every session) have
// traced so far, while they run: the progress of a long trace.
type StatusResult struct {
	Sessions     int    `json:"sessions"`     // running
	Threads      int    `json:"threads"`      // traced now
	Instructions uint64 `json:"instructions"` // user instructions traced so far
	Records      uint64 `json:"records"`      // ITrace records written so far
	Ended        int    `json:"ended"`        // sessions that ended (kept until itrace off)
}

// OnArgs select the threads to trace. The caller may trace only processes
// it could ptrace itself: root, or the same user as the target (real,
// effective and saved ids) with the target holding no capabilities and
// dumpable. Without the module the tracer runs with the caller's ids.
type OnArgs struct {
	PIDs     []int `json:"pids,omitempty"`      // processes, all their threads
	TIDs     []int `json:"tids,omitempty"`      // single threads (ITraceOn)
	PIDsFrom int   `json:"pids_from,omitempty"` // every process with a pid >= this one, at on (PI's lowest pid)
	Follow   bool  `json:"follow,omitempty"`    // follow forked children
	AtExec   bool  `json:"at_exec,omitempty"`   // start at the processes' next exec (run.itrace)
	// Step: how the threads are stepped (StepAuto, StepSingle, StepVerify).
	Step Step `json:"step,omitempty"`
	// MaxInsns, if > 0, ends the session once it traced this many user
	// instructions (the threads run on untraced). The ptrace path only.
	MaxInsns uint64 `json:"max_insns,omitempty"`
}

// OnResult says what is traced.
type OnResult struct {
	Session int      `json:"session"`
	Threads int      `json:"threads"`
	Skipped []string `json:"skipped,omitempty"` // --pids-from: processes left out, and why
}

// OffArgs select the sessions to stop: those tracing one of the PIDs or
// TIDs, or, with neither, every session the caller started (root: all).
type OffArgs struct {
	PIDs []int `json:"pids,omitempty"`
	TIDs []int `json:"tids,omitempty"`
}

// OffResult are the stopped sessions' counts.
type OffResult struct {
	Sessions     int    `json:"sessions"`
	Threads      int    `json:"threads"`
	Instructions uint64 `json:"instructions"`
	Records      uint64 `json:"records"`
	// ThreadsLeftOut: threads created past the per-session limit, which
	// ran untraced (the ptrace path).
	ThreadsLeftOut int `json:"threads_left_out,omitempty"`
	// LimitReached: a session ended at its MaxInsns.
	LimitReached bool `json:"limit_reached,omitempty"`

	StepCounts // the ptrace path's stepping
}

// StepCounts are the ptrace path's stepping (docs/itrace.md,
// "Block-stepping"), per tracer and summed per itrace off: Step as asked;
// BTF "honoured" or "ignored" as found (auto); resumes by single step and
// by block step; the block decoder's checks (--step verify: every block
// single-stepped and decoded as if block-stepped) with its disagreements
// and the time it took; block steps two branches could explain or that
// could not be counted (a thread killed inside one).
type StepCounts struct {
	Step            Step   `json:"step,omitempty"`
	BTF             string `json:"btf,omitempty"`
	SingleSteps     uint64 `json:"single_steps,omitempty"`
	BlockSteps      uint64 `json:"block_steps,omitempty"`
	BlocksChecked   uint64 `json:"blocks_checked,omitempty"`
	BlockMismatches uint64 `json:"block_mismatches,omitempty"`
	BlockNs         uint64 `json:"block_ns,omitempty"`
	BlocksAmbiguous uint64 `json:"blocks_ambiguous,omitempty"`
	BlocksLost      uint64 `json:"blocks_lost,omitempty"`
	// Single steps whose trap was lost (a hypervisor emulating cpuid):
	// the block decoder counted the instructions they ran.
	LostTraps uint64 `json:"lost_traps,omitempty"`
	// Verify: single steps block-stepping would still take (blocks it
	// cannot count exactly); + BlocksChecked = its stops.
	VerifySingle uint64 `json:"verify_single,omitempty"`
	// Block ends a conditional jump and a ret or indirect call could both
	// explain, decided by reading the stack (one system call each).
	StackReads uint64 `json:"stack_reads,omitempty"`
	// Breakpoint stepping: "work" or "ignored" as found; its lines run
	// natively, its stops before their ends, and breakpoints the kernel
	// refused to set (those threads single-stepped).
	Breakpoints     string `json:"breakpoints,omitempty"`
	BreakpointRuns  uint64 `json:"breakpoint_runs,omitempty"`
	BreakpointStops uint64 `json:"breakpoint_stops,omitempty"`
	BreakpointFails uint64 `json:"breakpoint_fails,omitempty"`
	// Job-control stops (PTRACE_EVENT_STOP: a SIGCONT, a group stop)
	// between a resume and its trap: resumed as they were, the trap that
	// followed accounted.
	NotifyStops uint64 `json:"notify_stops,omitempty"`
}

// Add sums o's counts into s (the step mode and BTF finding: o's, if set).
func (s *StepCounts) Add(o StepCounts) {
	s.Step = o.Step
	if o.BTF != "" {
		s.BTF = o.BTF
	}
	s.SingleSteps += o.SingleSteps
	s.BlockSteps += o.BlockSteps
	s.BlocksChecked += o.BlocksChecked
	s.BlockMismatches += o.BlockMismatches
	s.BlockNs += o.BlockNs
	s.BlocksAmbiguous += o.BlocksAmbiguous
	s.BlocksLost += o.BlocksLost
	s.NotifyStops += o.NotifyStops
	s.LostTraps += o.LostTraps
	s.VerifySingle += o.VerifySingle
	s.StackReads += o.StackReads
	if o.Breakpoints != "" {
		s.Breakpoints = o.Breakpoints
	}
	s.BreakpointRuns += o.BreakpointRuns
	s.BreakpointStops += o.BreakpointStops
	s.BreakpointFails += o.BreakpointFails
}

// Stepping says in a line how the ptrace path stepped ("" from the
// module, which reports no stepping counts).
func (r OffResult) Stepping() string {
	if r.SingleSteps == 0 && r.BlockSteps == 0 && r.BreakpointStops == 0 {
		return ""
	}
	var s string
	switch {
	case r.Breakpoints == "work":
		s = "breakpoint-stepped: straight lines ran natively between hardware breakpoints"
		if r.Step == StepAuto {
			s += " (BTF is ignored here)"
		}
	case r.Step == StepBreakpoint:
		s = "single-stepped: hardware breakpoints do not work here (--step breakpoint)"
	case r.Step == StepSingle:
		s = "single-stepped (--step single)"
	case r.Step == StepVerify:
		s = "single-stepped (--step verify)"
	case r.BTF == "ignored":
		s = "single-stepped: BTF is ignored here (PTRACE_SINGLEBLOCK stopped after one instruction)"
	case r.BTF == "honoured":
		s = "block-stepped where the decoder can count (BTF honoured)"
	default:
		s = "single-stepped (no block step tried)"
	}
	s += fmt.Sprintf("; %d single steps, %d block steps", r.SingleSteps, r.BlockSteps)
	if r.BreakpointStops > 0 {
		s += fmt.Sprintf(", %d breakpoint stops", r.BreakpointStops)
		if r.Instructions > 0 {
			s += fmt.Sprintf(" (%.3f stops per instruction)", float64(r.BreakpointStops+r.SingleSteps)/float64(r.Instructions))
		}
	}
	if r.BlocksChecked > 0 {
		s += fmt.Sprintf("; block decoder: %d blocks checked, %d disagreements", r.BlocksChecked, r.BlockMismatches)
		if r.BlockNs > 0 {
			s += fmt.Sprintf(", %.0f ns per block", float64(r.BlockNs)/float64(r.BlocksChecked))
		}
		s += fmt.Sprintf(" (%d decided by a stack read)", r.StackReads)
	}
	if r.Step == StepVerify && r.Instructions > 0 {
		stops := r.BlocksChecked + r.VerifySingle
		s += fmt.Sprintf("; block-stepping would stop %d times (%d block + %d single steps), %.3f per instruction, where BTF is honoured",
			stops, r.BlocksChecked, r.VerifySingle, float64(stops)/float64(r.Instructions))
	}
	if r.LostTraps > 0 {
		s += fmt.Sprintf("; %d single steps ran two or more instructions (a lost trap), counted by the block decoder", r.LostTraps)
	}
	if r.BlocksAmbiguous > 0 || r.BlocksLost > 0 {
		s += fmt.Sprintf("; %d ambiguous and %d uncounted block steps", r.BlocksAmbiguous, r.BlocksLost)
	}
	return s
}

// On starts tracing the selected threads (swtrace itrace on): through the
// pitrace module when it is loaded (see Backend), else through pitraced.
func On(a OnArgs) (OnResult, error) {
	var r OnResult
	if b, err := moduleBackend(""); err != nil {
		return r, err
	} else if b != nil {
		defer b.Close()
		return onModule(b, a)
	}
	c, err := dial()
	if err != nil {
		return r, err
	}
	defer c.Close()
	err = c.Call(OpOn, a, &r)
	return r, err
}

// Off stops ITrace sessions (swtrace itrace off). On the module, with no
// PIDs it stops every traced thread.
func Off(a OffArgs) (OffResult, error) {
	var r OffResult
	if b, err := moduleBackend(""); err != nil {
		return r, err
	} else if b != nil {
		defer b.Close()
		if len(a.TIDs) > 0 {
			return r, fmt.Errorf("itrace: the module stops single threads only as ITraceOff (the calling thread)")
		}
		return offModule(b, false, a.PIDs)
	}
	c, err := dial()
	if err != nil {
		return r, err
	}
	defer c.Close()
	err = c.Call(OpOff, a, &r)
	return r, err
}

// Status is what pitraced's ITrace sessions of the caller have traced so
// far (swtrace itrace status): the ptrace path only, whose tracing takes
// long enough to want it; with the module loaded it says so.
func Status() (StatusResult, error) {
	var r StatusResult
	if b, err := moduleBackend(""); err != nil {
		return r, err
	} else if b != nil {
		b.Close()
		return r, fmt.Errorf("itrace: status is pitraced's (the ptrace tracer): the pitrace module's ITrace runs near native speed and shows its records in swtrace info")
	}
	c, err := daemonclient.Dial() // a quick request: the counts are at hand
	if err != nil {
		return r, err
	}
	defer c.Close()
	err = c.Call(OpStatus, nil, &r)
	return r, err
}

// dial connects to pitraced for an ITrace request. Each waits on traced
// threads (attach, stop, detach: a thread being single-stepped runs a
// few thousand instructions a second, ITraceOff's own request included),
// so it gets the daemon client's long time limit, not the 10 s one of
// quick requests (which a loaded machine exceeded).
func dial() (*daemonclient.Client, error) {
	c, err := daemonclient.Dial()
	if err != nil {
		return nil, err
	}
	c.Timeout = c.LongTimeout
	return c, nil
}

// session is the calling goroutine's ITraceOn state.
type session struct {
	c   *daemonclient.Client
	kb  *kmodbackend.Backend // the module's file, when ITrace runs there
	tid int
}

var (
	mu      sync.Mutex
	current = map[int]*session{} // by tid
)

// ITraceOn starts tracing the calling thread (the goroutine is locked to
// it until ITraceOff): every instruction it runs from the return of this
// call to ITraceOff is traced into the facility, which must be on
// (swtrace on). The daemon's reply and the return path of this call are
// the first instructions in the trace.
func ITraceOn() error {
	runtime.LockOSThread()
	tid := unix.Gettid()
	mu.Lock()
	busy := current[tid] != nil
	mu.Unlock()
	if busy {
		return errors.New("itrace: ITraceOn: this thread is already traced")
	}
	if kb, err := moduleBackend(""); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("itrace: ITraceOn: %w", err)
	} else if kb != nil {
		mu.Lock()
		current[tid] = &session{kb: kb, tid: tid}
		mu.Unlock()
		// the last system call before the traced section
		if _, _, err := kb.ITraceOn(kmodbackend.ITraceSel{Self: true}); err != nil {
			mu.Lock()
			delete(current, tid)
			mu.Unlock()
			kb.Close()
			runtime.UnlockOSThread()
			return fmt.Errorf("itrace: ITraceOn: %w", err)
		}
		return nil
	}
	c, err := dial()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("itrace: ITraceOn: %w", err)
	}
	var r OnResult
	if err := c.Call(OpOn, OnArgs{TIDs: []int{tid}}, &r); err != nil {
		c.Close()
		runtime.UnlockOSThread()
		return fmt.Errorf("itrace: ITraceOn: %w", err)
	}
	mu.Lock()
	current[tid] = &session{c: c, tid: tid}
	mu.Unlock()
	return nil
}

// ITraceOff stops tracing the calling thread.
func ITraceOff() (OffResult, error) {
	tid := unix.Gettid()
	mu.Lock()
	s := current[tid]
	delete(current, tid)
	mu.Unlock()
	if s == nil {
		return OffResult{}, errors.New("itrace: ITraceOff without ITraceOn on this thread")
	}
	defer runtime.UnlockOSThread()
	if s.kb != nil {
		defer s.kb.Close()
		r, err := offModule(s.kb, true, nil)
		if err != nil {
			return r, fmt.Errorf("itrace: ITraceOff: %w", err)
		}
		return r, nil
	}
	defer s.c.Close()
	var r OffResult
	if err := s.c.Call(OpOff, OffArgs{TIDs: []int{tid}}, &r); err != nil {
		return r, fmt.Errorf("itrace: ITraceOff: %w", err)
	}
	return r, nil
}
