// Package itrace is the no-module ITrace tracer: it single-steps the
// selected threads with ptrace (PTRACE_SINGLESTEP), finds the taken branches
// by decoding each instruction's length (the next ip is not the
// fall-through), and writes the ITrace records (major 0x20 user branches,
// 0x21 system calls and signals; docs/trace-format.md) to a Sink of the
// same shape as the daemon's kernel-event sink, so they land in the
// facility's per-CPU trace buffers like every other record.
//
// One Tracer is one locked OS thread: ptrace requests must come from the
// thread that attached. Threads of a traced process are followed
// (PTRACE_O_TRACECLONE); children only with Options.Follow.
package itrace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"perfinsp/format/trace"

	"perfinsp/internal/x86branch"
	itracectl "perfinsp/libperfutil/itrace"
)

// Sink receives records (the shape of kevents.Sink's Trace).
type Sink interface {
	Trace(cpu int, major uint16, minor uint32, t uint64, fields []uint64)
}

// Options select what to trace.
type Options struct {
	// PIDs are processes traced with all their threads.
	PIDs []int
	// TIDs are single threads (ITraceOn: the calling thread).
	TIDs []int
	// Follow traces the children the traced processes fork.
	Follow bool
	// AtExec attaches now but starts stepping only at each process's next
	// exec: the trace then starts at the new program's first instruction.
	AtExec bool
	// Step: how the threads are stepped (block.go): itracectl.StepAuto
	// block-steps where the CPU honours BTF, StepSingle never does,
	// StepVerify single-steps and checks the block decoder at every block.
	Step itracectl.Step
	// Log, if set, says once per session whether block-stepping works.
	Log func(format string, args ...any)
	// OptionalPIDs are processes traced like PIDs, except that one that
	// cannot be attached (gone, or refused by the kernel) is left out and
	// said in Skipped instead of failing the session (--pids-from).
	OptionalPIDs []int
	// MaxThreads, if > 0, bounds the threads traced at once: a session
	// that would attach more fails; threads created past it run untraced
	// (Stats.ThreadsLeftOut).
	MaxThreads int
	// MaxInsns, if > 0, ends the session once this many user instructions
	// were traced: every thread is let go (Stats.LimitReached).
	MaxInsns uint64

	// noBreakpoints (tests): auto does not try breakpoint stepping where
	// BTF is ignored (the single-step fallback, as where debug registers
	// do not work).
	noBreakpoints bool
	// emulateBTF (tests): block steps are single steps whose stops at
	// a fall-through are taken silently, so the tracer sees only the
	// stops a CPU honouring BTF would give (block.go).
	emulateBTF bool
}

// Stats are a tracer's counts.
type Stats struct {
	Threads      int    // threads traced now
	Traced       int    // threads traced in all
	Instructions uint64 // user instructions traced
	Records      uint64 // records written
	Syscalls     uint64
	Signals      uint64
	// TrapsDropped: threads let go (Stop, a full buffer) with a step's
	// SIGTRAP queued and not yet delivered; the tracer took it first.
	TrapsDropped uint64
	// ThreadsLeftOut: threads created past Options.MaxThreads, let go
	// untraced.
	ThreadsLeftOut int
	// LimitReached: the session ended at Options.MaxInsns.
	LimitReached bool

	// Stepping (block.go): the mode and what the tracer found. Its
	// emulated BTF (tests) checks blocks as verify does.
	itracectl.StepCounts
}

// insnCache holds the decoded instructions and blocks of one address
// space.
type insnCache struct {
	pid int
	dec *x86branch.Decoder
}

type thread struct {
	tid, pid int
	as       *insnCache
	stepping bool   // false: attached, waiting for exec (AtExec)
	running  bool   // resumed, stop not yet seen
	req      int    // the ptrace request it was resumed with (0: not resumed since its last stop)
	ip       uint64 // next instruction to execute
	start    uint64 // block start
	count    uint32 // instructions executed in the block
	lastOff  uint32 // offset of the last executed instruction from start
	cur      x86branch.Insn
	rcx      uint64 // rcx at ip (before the instruction runs)
	injected int    // signal injected on the last resume
	noExec   bool
	tStep    uint64
	handlers int // signal handlers entered and not yet returned from (rt_sigreturn)
	// sysret: the last instruction stepped was a system call. A system
	// call stopped and continued (SIGSTOP/SIGCONT: the kernel restarts
	// it without a handler) reports single-step traps at the instruction
	// after it with no instruction run; callgrind counts none.
	sysret  bool
	detach  bool // attached by a clone/fork of a thread not yet stepped: let go
	startOn bool // start stepping at the first stop
	ended   bool

	read x86branch.CodeReader // the thread's code
	// block: resumed with a block step of blk (from ip). Emulated BTF
	// (tests): the block step's next single step starts at emuIP; it
	// has run emuN instructions so far, the last at emuLast.
	block   bool
	blk     *x86branch.Block
	emuIP   uint64
	emuN    uint32
	emuLast uint64 // the last instruction the emulated block step ran
	// verify: the block a block step would have run from ip (the count
	// was vCount then); nil when none is under way.
	vblk   *x86branch.Block
	vCount uint32

	// Breakpoint stepping (breakpoint.go): DR0's and DR1's addresses and
	// the DR7 written (0: off); a probe under way; the run under way
	// (run nil when none: the lines through direct branches via, then
	// run and, fork, its conditional jump's two ways); before: stopped
	// by the breakpoint before th.ip, with regs.
	dr0, dr1 uint64
	dr7      uint64
	hwProbe  bool
	run      *x86branch.Run
	via      []*x86branch.Run
	fork     bool
	ways     [2]way
	ends     []uint64 // split's scratch
	// pre: the branch the run started before (resumed from a stop
	// before it), going to preTo; accounted once the run is known to
	// have run it (Addr 0: none).
	pre    x86branch.BranchInsn
	preTo  uint64
	rep    x86branch.BranchInsn // a rep run natively (Addr 0: none)
	repRCX uint64               // its rcx before it ran
	before bool
	regs   unix.PtraceRegs
}

// Tracer is one running ITrace session.
type Tracer struct {
	sink  Sink
	opts  Options
	t0    uint64
	s0    time.Time
	stop  atomic.Bool
	done  chan struct{}
	err   error
	ready chan error
	// skipped: optional processes left out, and why (set before ready).
	skipped []string
	mu      sync.Mutex
	stats   Stats
	tids    []int // traced threads, for Stop's wake-up (under mu)
	fields  [8]uint64

	threads map[int]*thread
	// earlyOut: threads left out at a first stop that came before their
	// creator's clone event, already let go; the clone event, when it
	// comes, finds them here (and counts them no second time).
	earlyOut map[int]bool
	spaces   map[int]*insnCache
	cpu      int
	lastTid  int
	lastCPU  int
	nrec     uint64
	btf      btfState
	hw       hwState
}

// btfState: whether PTRACE_SINGLEBLOCK block-steps on this machine.
type btfState uint8

const (
	btfUnknown btfState = iota
	btfHonoured
	btfIgnored
)

// ErrNothing is returned when no thread could be traced.
var ErrNothing = errors.New("itrace: nothing to trace")

func monoNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

// Start attaches to the selected threads and starts tracing them. It
// returns once every selected thread is attached (or with the reason one
// could not be).
func Start(opts Options, sink Sink) (*Tracer, error) {
	if len(opts.PIDs) == 0 && len(opts.TIDs) == 0 && len(opts.OptionalPIDs) == 0 {
		return nil, ErrNothing
	}
	switch opts.Step {
	case itracectl.StepAuto, itracectl.StepSingle, itracectl.StepVerify, itracectl.StepBreakpoint:
	default:
		return nil, fmt.Errorf("itrace: unknown stepping %q: say auto (\"\"), breakpoint, single or verify", opts.Step)
	}
	t := &Tracer{sink: sink, opts: opts, done: make(chan struct{}), ready: make(chan error, 1),
		threads: map[int]*thread{}, earlyOut: map[int]bool{}, spaces: map[int]*insnCache{}, lastTid: -1, lastCPU: -1}
	t.t0, t.s0 = monoNow(), time.Now()
	t.stats.Step = opts.Step
	go t.run()
	if err := <-t.ready; err != nil {
		<-t.done
		return nil, err
	}
	return t, nil
}

// now is the facility clock (CLOCK_MONOTONIC ns) without a system call.
func (t *Tracer) now() uint64 { return t.t0 + uint64(time.Since(t.s0)) }

// Done is closed when no traced thread is left or the tracer stopped.
func (t *Tracer) Done() <-chan struct{} { return t.done }

// Err is why the tracer ended early, after Done.
func (t *Tracer) Err() error { return t.err }

// Skipped lists the optional processes that were left out, and why.
func (t *Tracer) Skipped() []string { return t.skipped }

// Stats returns the counts so far.
func (t *Tracer) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats
}

// Stop detaches from every traced thread (they continue untraced), writes
// each thread's last block and waits for the tracer to end.
func (t *Tracer) Stop() Stats {
	t.stop.Store(true)
	// A thread blocked in a system call gives the tracer no stop to act
	// on: SIGURG (ignored by default, and harmless to Go programs) makes
	// it stop; the tracer drops the signal.
	t.mu.Lock()
	tids := append([]int(nil), t.tids...)
	t.mu.Unlock()
	for _, tid := range tids {
		_ = unix.Tgkill(t.pidOf(tid), tid, unix.SIGURG)
	}
	<-t.done
	return t.Stats()
}

func (t *Tracer) pidOf(tid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return tid
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Tgid:"); ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				return n
			}
		}
	}
	return tid
}

// taskStatus returns a thread's state letter and its tracer's thread
// id (0: none); gone when the thread has no /proc entry any more.
func taskStatus(tid int) (state byte, tracer int, gone bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return 0, 0, true
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "State:"); ok {
			if v = strings.TrimSpace(v); v != "" {
				state = v[0]
			}
		}
		if v, ok := strings.CutPrefix(l, "TracerPid:"); ok {
			tracer, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return state, tracer, false
}

func tasks(pid int) ([]int, error) {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return nil, fmt.Errorf("itrace: %w", processErr(pid, err))
	}
	var out []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out, nil
}

func (t *Tracer) ptraceOptions() int {
	o := unix.PTRACE_O_TRACECLONE | unix.PTRACE_O_TRACEEXEC
	if t.opts.Follow {
		o |= unix.PTRACE_O_TRACEFORK | unix.PTRACE_O_TRACEVFORK
	}
	return o
}

func (t *Tracer) space(pid int) *insnCache {
	as := t.spaces[pid]
	if as == nil {
		as = &insnCache{pid: pid, dec: x86branch.NewDecoder()}
		t.spaces[pid] = as
	}
	return as
}

func (t *Tracer) seize(tid, pid int) error {
	if _, ok := t.threads[tid]; ok {
		return nil
	}
	// The options go with the seize: PTRACE_SETOPTIONS needs a stopped tracee.
	if t.opts.MaxThreads > 0 && len(t.threads) >= t.opts.MaxThreads {
		return fmt.Errorf("itrace: more than %d threads to trace, the limit of one session: trace fewer processes at once", t.opts.MaxThreads)
	}
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, uintptr(tid), 0, uintptr(t.ptraceOptions()), 0, 0); e != 0 {
		if e == unix.EPERM {
			state, tracer, gone := taskStatus(tid)
			switch {
			case tracer == unix.Gettid():
				// Created by a thread seized a moment ago: TRACECLONE
				// made it ours, and its first stop (or its creator's
				// clone event) adds it in the loop.
				return nil
			case gone || state == 'Z' || state == 'X':
				// Exiting: the kernel refuses to attach to a thread past
				// its exit.
				return fmt.Errorf("itrace: attach to thread %d: %w", tid, unix.ESRCH)
			case tracer > 0:
				return fmt.Errorf("itrace: attach to thread %d: %w: it is traced already (by process %d)", tid, e, tracer)
			}
		}
		if e == unix.EPERM {
			why := "or ptrace is restricted"
			if b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil && strings.TrimSpace(string(b)) != "0" && os.Geteuid() != 0 {
				why = "or Yama's ptrace_scope (" + strings.TrimSpace(string(b)) + ") allows tracing only descendants and processes that allow it (prctl PR_SET_PTRACER): root may trace, or kernel.yama.ptrace_scope=0 lets users trace their own processes"
			}
			return fmt.Errorf("itrace: attach to thread %d: %w: the kernel refused (the process runs with rights its tracer lacks: another user, setuid or capabilities, not dumpable; %s)", tid, e, why)
		}
		return fmt.Errorf("itrace: attach to thread %d: %w", tid, e)
	}
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_INTERRUPT, uintptr(tid), 0, 0, 0, 0); e != 0 {
		return fmt.Errorf("itrace: interrupt thread %d: %w", tid, e)
	}
	th := t.addThread(tid, pid, false)
	th.running, th.startOn = true, !t.opts.AtExec
	return nil
}

// isCreation reports whether a ptrace event is a clone, fork or vfork.
func isCreation(event int) bool {
	return event == unix.PTRACE_EVENT_CLONE || event == unix.PTRACE_EVENT_FORK || event == unix.PTRACE_EVENT_VFORK
}

// newChild is the thread (or process: pid) th's clone, fork or vfork
// event made, when it is not known yet: attached from its start
// (PTRACE_O_TRACECLONE, TRACEFORK), its first stop may come before this
// event or after it.
func (t *Tracer) newChild(th *thread, event int) (child, pid int, ok bool) {
	msg, err := unix.PtraceGetEventMsg(th.tid)
	if err != nil {
		return 0, 0, false
	}
	child = int(msg)
	if t.earlyOut[child] {
		delete(t.earlyOut, child) // left out at its first stop, already let go
		return 0, 0, false
	}
	if _, ok := t.threads[child]; ok {
		return 0, 0, false
	}
	pid = th.pid
	if event != unix.PTRACE_EVENT_CLONE {
		pid = child
	}
	return child, pid, true
}

// addChild adds a thread newChild found, running until its first stop.
func (t *Tracer) addChild(child, pid, event int) *thread {
	c := t.addThread(child, pid, false)
	c.running = true
	if event != unix.PTRACE_EVENT_CLONE {
		// A forked child has its own address space (a copy).
		c.as = t.space(child)
	}
	return c
}

// letChildGo registers the thread th's creation event made, to be let go
// at its first stop (which the loop waits for), untraced.
func (t *Tracer) letChildGo(th *thread, event int) {
	if child, pid, ok := t.newChild(th, event); ok {
		t.addChild(child, pid, event).detach = true
	}
}

func (t *Tracer) addThread(tid, pid int, stepping bool) *thread {
	th := &thread{tid: tid, pid: pid, as: t.space(pid), stepping: stepping}
	th.read = func(addr uint64, buf []byte) int { return readCode(th.tid, addr, buf) }
	t.threads[tid] = th
	t.mu.Lock()
	t.tids = append(t.tids, tid)
	t.stats.Threads = len(t.threads)
	t.stats.Traced++
	t.mu.Unlock()
	return th
}

// attachProcess seizes every thread of pid. Threads created while
// attaching are caught by TRACECLONE of an attached thread, or by the
// next scan.
func (t *Tracer) attachProcess(pid int) error {
	for {
		tids, err := tasks(pid)
		if err != nil {
			return err
		}
		added := false
		for _, tid := range tids {
			if _, ok := t.threads[tid]; ok {
				continue
			}
			if err := t.seize(tid, pid); err != nil {
				if errors.Is(err, unix.ESRCH) {
					continue // exited meanwhile
				}
				return err
			}
			if _, ok := t.threads[tid]; ok { // not when its creator's TRACECLONE took it
				added = true
			}
		}
		if !added {
			return nil
		}
	}
}

// full reports whether a new thread is past Options.MaxThreads: it is
// then let go untraced at its first stop.
func (t *Tracer) full() bool {
	if t.opts.MaxThreads <= 0 || len(t.threads) < t.opts.MaxThreads {
		return false
	}
	// Threads being let go (left out, or not followed) hold no slot: they
	// stay in t.threads only until their first stop detaches them.
	traced := 0
	for _, th := range t.threads {
		if !th.detach {
			traced++
		}
	}
	if traced < t.opts.MaxThreads {
		return false
	}
	t.mu.Lock()
	t.stats.ThreadsLeftOut++
	t.mu.Unlock()
	return true
}

func (t *Tracer) attach() error {
	for _, tid := range t.opts.TIDs {
		if err := t.seize(tid, t.pidOf(tid)); err != nil {
			return err
		}
	}
	for _, pid := range t.opts.PIDs {
		if err := t.attachProcess(pid); err != nil {
			return err
		}
	}
	for _, pid := range t.opts.OptionalPIDs {
		n := len(t.threads)
		if err := t.attachProcess(pid); err != nil {
			if len(t.threads) != n {
				return err // refused past its first thread: not a rights question
			}
			t.skipped = append(t.skipped, err.Error())
		}
	}
	if len(t.threads) == 0 {
		return ErrNothing
	}
	return nil
}

func (t *Tracer) run() {
	runtime.LockOSThread() // ptrace: every request from the attaching thread; never unlocked
	defer close(t.done)
	if err := t.attach(); err != nil {
		tids := make([]int, 0, len(t.threads))
		for tid := range t.threads {
			tids = append(tids, tid)
		}
		letGo(tids)
		t.err = err
		t.ready <- err
		return
	}
	t.ready <- nil
	t.cpu = getcpu()
	if err := t.loop(); err != nil {
		t.err = err
	}
}

func getcpu() int {
	var cpu uint32
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); e != 0 {
		return 0
	}
	return int(cpu)
}

// emit writes one record, preceded by ITRACE_THREAD when the thread or the
// buffer changed.
func (t *Tracer) emit(th *thread, major uint16, minor uint32, fields []uint64) {
	t.nrec++
	// Every record of a session goes into one CPU's buffer (t.cpu, where
	// the tracer started): the records reach the agent in batches, after
	// other records of later times were written into the buffers, so a
	// session spread over several buffers could be merged out of order by
	// time; within one buffer its order is the order it was traced in.
	now := t.now()
	if th.tid != t.lastTid || t.cpu != t.lastCPU {
		t.lastTid, t.lastCPU = th.tid, t.cpu
		ctx := [2]uint64{uint64(th.pid), uint64(th.tid)}
		t.sink.Trace(t.cpu, trace.MajorITraceU, trace.ITraceThread, now, ctx[:])
		t.nrec++
	}
	t.sink.Trace(t.cpu, major, minor, now, fields)
}

// endBlock writes a record that ends th's block and starts the next at to.
func (t *Tracer) endBlock(th *thread, major uint16, minor uint32, to uint64, extra ...uint64) {
	f := t.fields[:3]
	f[0], f[1], f[2] = to, uint64(th.count), uint64(th.lastOff)
	f = append(f, extra...)
	t.emit(th, major, minor, f)
	th.start, th.count, th.lastOff = to, 0, 0
	th.vblk = nil
}

func (t *Tracer) startThread(th *thread, ip uint64, flags uint64) {
	th.stepping, th.ip, th.start, th.count, th.lastOff = true, ip, ip, 0, 0
	// A thread attached inside a system call may report a trap before
	// any instruction ran, as after a stepped one: single-step first.
	th.block, th.vblk, th.sysret = false, nil, true
	t.fields[0], t.fields[1], t.fields[2], t.fields[3] = uint64(th.pid), uint64(th.tid), ip, flags
	t.emit(th, trace.MajorITraceU, trace.ITraceStart, t.fields[:4])
}

func (t *Tracer) endThread(th *thread, reason uint64) {
	if th.ended || !th.stepping {
		th.ended = true
		return
	}
	th.ended = true
	t.fields[0], t.fields[1], t.fields[2], t.fields[3], t.fields[4] = uint64(th.pid), uint64(th.tid), uint64(th.count), uint64(th.lastOff), reason
	t.emit(th, trace.MajorITraceU, trace.ITraceEnd, t.fields[:5])
}

func (t *Tracer) drop(tid int) {
	delete(t.threads, tid)
	t.mu.Lock()
	for i, x := range t.tids {
		if x == tid {
			t.tids = append(t.tids[:i], t.tids[i+1:]...)
			break
		}
	}
	t.stats.Threads = len(t.threads)
	t.mu.Unlock()
}

// classify returns the instruction at ip in th's address space.
func (t *Tracer) classify(th *thread, ip uint64) x86branch.Insn {
	return th.as.dec.Insn(th.read, ip).Insn
}

// readCode reads the code of thread tid at addr (x86branch.CodeReader).
func readCode(tid int, addr uint64, buf []byte) int {
	n, _ := unix.ProcessVMReadv(tid, []unix.Iovec{{Base: &buf[0], Len: uint64(len(buf))}},
		[]unix.RemoteIovec{{Base: uintptr(addr), Len: len(buf)}}, 0)
	if n > 0 {
		return n
	}
	// The bytes cross into an unmapped page: read what is mapped.
	n = 0
	var w [8]byte
	for n < len(buf) {
		k, err := unix.PtracePeekText(tid, uintptr(addr)+uintptr(n), w[:])
		if err != nil || k == 0 {
			break
		}
		n += copy(buf[n:], w[:k])
	}
	return n
}

// blockable returns the block a block step from th's ip would run, or nil
// if th must be single-stepped: after a system call or an exec (the
// traps with no instruction run, step handles them), with a signal to
// deliver, or a block the decoder cannot count (block.go).
func (t *Tracer) blockable(th *thread, sig int) *x86branch.Block {
	if sig != 0 || th.sysret || th.noExec || t.stop.Load() {
		return nil
	}
	b := th.as.dec.Block(th.read, th.ip)
	if !b.Steppable {
		return nil
	}
	return b
}

func (t *Tracer) resume(th *thread, sig int) error {
	th.injected = 0
	th.running = true
	var err error
	if th.stepping {
		th.injected = sig
		th.tStep = t.now()
		var b *x86branch.Block
		switch t.opts.Step {
		case itracectl.StepAuto:
			if t.btf != btfIgnored {
				if b = t.blockable(th, sig); b != nil && t.btf == btfUnknown && !b.Probe {
					b = nil // until BTF is known to work, only blocks that tell
				}
			} else if !t.opts.noBreakpoints {
				if done, err := t.bpResume(th, sig); done {
					return err
				}
			}
		case itracectl.StepBreakpoint:
			if done, err := t.bpResume(th, sig); done {
				return err
			}
		case itracectl.StepVerify:
			if th.vblk == nil {
				if th.vblk = t.blockable(th, sig); th.vblk != nil {
					th.vCount = th.count
				} else {
					t.stats.VerifySingle++ // auto would single-step this one too
				}
			}
		}
		if b != nil {
			th.block, th.blk, th.cur = true, b, x86branch.Insn{}
			if t.opts.emulateBTF {
				th.emuIP, th.emuN = th.ip, 0
				err = t.cont(th, unix.PTRACE_SINGLESTEP, 0)
			} else if err = t.cont(th, unix.PTRACE_SINGLEBLOCK, 0); errors.Is(err, unix.EIO) {
				t.setBTF(btfIgnored, "PTRACE_SINGLEBLOCK is refused (EIO)")
				th.block = false
			}
			if th.block {
				t.stats.BlockSteps++
			}
		}
		if !th.block {
			th.before = false
			if th.dr7 != 0 && !th.hwProbe {
				t.disarm(th)
			}
			th.cur = t.classify(th, th.ip)
			t.stats.SingleSteps++
			err = t.cont(th, unix.PTRACE_SINGLESTEP, sig)
		}
	} else {
		err = t.cont(th, unix.PTRACE_CONT, sig)
	}
	if err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("itrace: resume thread %d: %w", th.tid, err)
	}
	return nil
}

// goOn resumes th after a stop its stepping accounted for or, once the
// session is stopping (stopping set then) and th is in no signal
// handler, lets it go.
func (t *Tracer) goOn(th *thread, stopping *bool) error {
	if *stopping || t.stop.Load() {
		*stopping = true
		if th.handlers == 0 {
			t.detach(th, 0, trace.ITraceEndOff)
			return nil
		}
	}
	return t.resume(th, 0)
}

// decided sets a Stats field saying what a way of stepping does here
// (under mu) and logs the line that says it.
func (t *Tracer) decided(field *string, value, format string, args ...any) {
	t.mu.Lock()
	*field = value
	t.mu.Unlock()
	if t.opts.Log != nil {
		t.opts.Log(format, args...)
	}
}

// setBTF records what block-stepping does here, and says it once.
func (t *Tracer) setBTF(s btfState, why string) {
	if t.btf != btfUnknown {
		return
	}
	t.btf = s
	if s == btfHonoured {
		t.decided(&t.stats.BTF, "honoured", "itrace: block-stepping: the CPU honours BTF (%s): one stop per taken branch", why)
	} else {
		t.decided(&t.stats.BTF, "ignored", "itrace: block-stepping: BTF is ignored here (%s; TCG and hypervisors do that): single-stepping", why)
	}
}

// blockTrap accounts the trap ending th's block step at regs.Rip.
func (t *Tracer) blockTrap(th *thread, regs *unix.PtraceRegs) {
	b, newIP := th.blk, regs.Rip
	end := t.resolve(th, b, b.End(newIP), regs)
	if t.opts.emulateBTF {
		// What single-stepping saw: emuN instructions, the last at emuLast.
		last := t.classify(th, th.emuLast)
		if end.N != th.emuN || end.Last != th.emuLast || end.Kind != last.Kind {
			t.stats.BlockMismatches++
			t.logMismatch(th, b.Start, newIP, end, th.emuN, th.emuLast, last.Kind)
		}
		t.stats.BlocksChecked++
	}
	th.ip, th.rcx, th.sysret = newIP, regs.Rcx, false
	switch end.How {
	case x86branch.Taken:
		if end.N >= 2 {
			t.setBTF(btfHonoured, fmt.Sprintf("a block step from %#x ran %d instructions", b.Start, end.N))
		}
		th.count += end.N
		th.lastOff = uint32(end.Last - th.start)
		t.stats.Instructions += uint64(end.N)
		if !end.NoBranch {
			t.endBlock(th, trace.MajorITraceU, end.Kind.Minor(), newIP)
		}
	case x86branch.FellThrough:
		// One instruction ran and did not branch: a single step.
		if b.Probe {
			t.setBTF(btfIgnored, fmt.Sprintf("PTRACE_SINGLEBLOCK stopped at %#x, the fall-through of the non-branch instruction at %#x", newIP, b.Start))
		}
		th.count++
		th.lastOff = uint32(end.Last - th.start)
		t.stats.Instructions++
	default:
		// No way through the block leads here: the instructions are
		// lost; the block ends as an undecodable branch.
		t.stats.BlocksLost++
		t.endBlock(th, trace.MajorITraceU, x86branch.KindUndecodable.Minor(), newIP)
	}
}

// resolve decides an Ambiguous block end from the stack: a conditional
// jump went to the stop, or the block's last instruction did — a ret
// leaves its return address just below the new stack pointer, an
// indirect call on top of it. Where both remain possible it stays
// Ambiguous (counted; the conditional jump is taken).
func (t *Tracer) resolve(th *thread, b *x86branch.Block, end x86branch.BlockEnd, regs *unix.PtraceRegs) x86branch.BlockEnd {
	if !end.Ambiguous {
		return end
	}
	last, fin := b.Final()
	var slot uint64
	var want uint64
	switch last.Kind {
	case x86branch.KindReturn:
		slot, want = regs.Rsp-8-uint64(last.Pop), regs.Rip
	case x86branch.KindCall:
		slot, want = regs.Rsp, last.Next()
	default:
		t.stats.BlocksAmbiguous++
		return end
	}
	var buf [8]byte
	t.stats.StackReads++
	if readCode(th.tid, slot, buf[:]) != 8 {
		t.stats.BlocksAmbiguous++
		return end
	}
	v := uint64(buf[0]) | uint64(buf[1])<<8 | uint64(buf[2])<<16 | uint64(buf[3])<<24 |
		uint64(buf[4])<<32 | uint64(buf[5])<<40 | uint64(buf[6])<<48 | uint64(buf[7])<<56
	switch {
	case v != want:
		end.Ambiguous = false // the last instruction did not go there
	case last.Kind == x86branch.KindCall:
		return fin // its return address is on top: the call ran
	default:
		t.stats.BlocksAmbiguous++
	}
	return end
}

// blockCut accounts a block step stopped before its branch (a signal to
// deliver, the tracer's interrupt): the instructions from the block's
// start to ip all fell through.
func (t *Tracer) blockCut(th *thread, ip uint64) {
	n, last, ok := th.blk.FallThrough(ip)
	if t.opts.emulateBTF {
		if n != th.emuN {
			t.stats.BlockMismatches++
			t.logMismatch(th, th.blk.Start, ip, x86branch.BlockEnd{N: n, Last: last}, th.emuN, th.emuLast, 0)
		}
		t.stats.BlocksChecked++
	}
	if !ok {
		t.stats.BlocksLost++
		return
	}
	if n > 0 {
		th.count += n
		th.lastOff = uint32(last - th.start)
		t.stats.Instructions += uint64(n)
	}
	th.ip = ip
}

// verifyEnd checks a block single-stepped under StepVerify, ended by a
// taken branch to newIP (the last instruction at prev, of kind k): the
// decoder must give the same count, last instruction and kind.
func (t *Tracer) verifyEnd(th *thread, regs *unix.PtraceRegs, prev uint64, k x86branch.Kind, noBranch bool) {
	b := th.vblk
	if b == nil {
		return
	}
	th.vblk = nil
	newIP := regs.Rip
	t0 := t.now()
	end := t.resolve(th, b, b.End(newIP), regs)
	t.stats.BlockNs += t.now() - t0
	t.stats.BlocksChecked++
	n := th.count - th.vCount // the branch counted
	if end.How != x86branch.Taken || end.N != n || end.Last != prev || end.Kind != k || end.NoBranch != noBranch {
		t.stats.BlockMismatches++
		t.logMismatch(th, b.Start, newIP, end, n, prev, k)
	}
}

// verifyCut checks a block cut by a signal or a stop under StepVerify.
func (t *Tracer) verifyCut(th *thread) {
	b := th.vblk
	if b == nil {
		return
	}
	th.vblk = nil
	n, _, ok := b.FallThrough(th.ip)
	t.stats.BlocksChecked++
	if !ok || n != th.count-th.vCount {
		t.stats.BlockMismatches++
		t.logMismatch(th, b.Start, th.ip, x86branch.BlockEnd{How: x86branch.NoMatch, N: n}, th.count-th.vCount, 0, 0)
	}
}

func (t *Tracer) logMismatch(th *thread, start, stop uint64, got x86branch.BlockEnd, n uint32, last uint64, k x86branch.Kind) {
	if t.opts.Log != nil && t.stats.BlockMismatches <= 10 {
		t.opts.Log("itrace: block decoder disagrees (thread %d, block %#x..stop %#x): decoded %+v; stepped: %d instructions, the last at %#x, kind %d",
			th.tid, start, stop, got, n, last, k)
		if os.Getenv("ITRACE_DEBUG") != "" {
			b := th.as.dec.Block(th.read, start)
			for _, in := range b.Insns {
				var buf [16]byte
				m := th.read(in.Addr, buf[:])
				t.opts.Log("  %#x len %d kind %d cond %v target %#x  % x", in.Addr, in.Len, in.Kind, in.Cond, in.Target, buf[:min(m, int(max(in.Len, 6)))])
			}
			mp, _ := os.ReadFile("/proc/" + strconv.Itoa(th.pid) + "/maps")
			t.opts.Log("%s", mp)
		}
	}
}

// cont resumes th with req (a step, a block step or a run to a breakpoint)
// and keeps req for the case renotified handles.
func (t *Tracer) cont(th *thread, req, sig int) error {
	th.req = req
	return ptraceSig(req, th.tid, sig)
}

// renotified resumes th again with req, the request it was resumed with,
// after a job-control stop that came before that request's trap: a seized
// thread stops for PTRACE_EVENT_STOP (a SIGCONT sent to its process, or a
// group stop) on its way back to user mode, and a step's or a
// breakpoint's SIGTRAP already queued then is reported only at the next
// resume, at the same address, with no instruction run. Accounting that
// stop as the end of the step or run would count its instructions and
// then the late trap again; resumed as it was, the thread reports the
// queued trap (or, none queued, runs on to it) and the trap is accounted
// as it would have been. Job-control stops are not honoured while traced.
// It is not used once the session stops (Stop's PTRACE_INTERRUPT ends a
// step with the same stop) or for a thread to let go.
func (t *Tracer) renotified(th *thread, ws unix.WaitStatus, req int, stopping bool) (bool, error) {
	if req == 0 || !ws.Stopped() || int(ws>>16) != unix.PTRACE_EVENT_STOP || stopping || t.stop.Load() || th.detach {
		return false, nil
	}
	t.stats.NotifyStops++
	if err := t.cont(th, req, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return true, fmt.Errorf("itrace: resume thread %d: %w", th.tid, err)
	}
	th.running = true
	return true, nil
}

func ptraceSig(req, tid, sig int) error {
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(tid), 0, uintptr(sig), 0, 0); e != 0 {
		return e
	}
	return nil
}

func (t *Tracer) detach(th *thread, sig int, reason uint64) {
	t.endThread(th, reason)
	t.disarm(th)
	if th.stepping {
		sig = t.dropStepTrap(th, sig)
	}
	_ = ptraceSig(unix.PTRACE_DETACH, th.tid, sig)
	t.drop(th.tid)
}

// detachAtCreation lets th go at its vfork event, and its child (ours
// already: PTRACE_O_TRACEVFORK) at the child's first stop. th is not
// resumed first (dropStepTrap): a vfork's parent would wait for its
// child, which waits at its first stop for this loop. Stopped inside the
// system call it has no step trap queued, and the detach clears the trap
// flag and the system call's exit trap (as at flushStepTrap's creation
// event). A clone's or fork's creator is let go as any other thread.
func (t *Tracer) detachAtCreation(th *thread, sig, event int) {
	t.letChildGo(th, event)
	t.endThread(th, trace.ITraceEndOff)
	t.disarm(th)
	_ = ptraceSig(unix.PTRACE_DETACH, th.tid, sig)
	t.drop(th.tid)
}

// dropStepTrap takes a stepping thread's queued step trap before the
// thread is let go. A stop for PTRACE_INTERRUPT or a group stop can come
// after a step's trap was queued and before it was delivered (get_signal
// takes job-control traps first; a loaded machine preempts the thread in
// between): detached there, the thread would die of that SIGTRAP. The
// thread is resumed without stepping; its next stop delivers the queued
// trap, which is dropped. A trap not queued yet is taken by running the
// thread once more and stopping it again (flushStepTrap). sig is the
// signal to deliver (passed on the first resume); the result is the
// signal still to deliver at the detach.
func (t *Tracer) dropStepTrap(th *thread, sig int) int {
	sig = t.takeQueuedTraps(th.tid, sig)
	return t.takeQueuedTraps(th.tid, t.flushStepTrap(th, sig))
}

// takeQueuedTraps resumes th without stepping while a step's trap is
// queued, dropping each at the stop that delivers it (dropStepTrap).
func (t *Tracer) takeQueuedTraps(tid, sig int) int {
	for i := 0; i < 4 && stepTrapQueued(tid); i++ {
		if ptraceSig(unix.PTRACE_CONT, tid, sig) != nil {
			return 0
		}
		sig = 0
		ws, ok := waitStop(tid)
		if !ok {
			return 0 // it ended
		}
		if uint32(ws)>>16 != 0 {
			continue // an event or group stop: no signal is being delivered
		}
		sig = t.signalStop(ws) // the program's: delivered at the detach
	}
	return sig
}

// waitStop waits for tid's next stop; false when it ended instead.
func waitStop(tid int) (unix.WaitStatus, bool) {
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(tid, &ws, unix.WALL, nil)
		if !errors.Is(err, unix.EINTR) {
			return ws, err == nil && ws.Stopped()
		}
	}
}

// signalStop sorts a signal-delivery stop met while a thread is let go:
// a SIGTRAP (a step's) is dropped and counted, SIGSTOP and SIGURG (the
// tracer's own) are dropped; any other is the program's, returned to be
// delivered.
func (t *Tracer) signalStop(ws unix.WaitStatus) int {
	switch s := ws.StopSignal(); {
	case s == unix.SIGTRAP:
		t.stats.TrapsDropped++
	case s != unix.SIGSTOP && s != unix.SIGURG:
		return int(s)
	}
	return 0
}

// flushStepTrap runs a stepping thread once more without stepping and
// stops it again (PTRACE_INTERRUPT), taking the step traps that come
// meanwhile. A thread stopped on its way out of a system call it was
// stepped into (a blocking one the session's end interrupted) can report
// that step's trap only after this stop, once the call completes:
// detached first, it would die of it. A thread it creates meanwhile is
// let go at its first stop, and the creator at its creation event. sig
// and the result are as dropStepTrap's.
func (t *Tracer) flushStepTrap(th *thread, sig int) int {
	tid := th.tid
	for pass := sig; ; {
		if ptraceSig(unix.PTRACE_CONT, tid, pass) != nil {
			return 0
		}
		if ptraceSig(unix.PTRACE_INTERRUPT, tid, 0) != nil {
			return 0
		}
		ws, ok := waitStop(tid)
		if !ok {
			return 0 // it ended
		}
		pass = 0
		switch event := ws.TrapCause(); {
		case event == unix.PTRACE_EVENT_STOP:
			return 0
		case isCreation(event):
			// Detached here: a vfork's parent, resumed, would wait for
			// its child, which waits at its first stop for the loop.
			t.letChildGo(th, event)
			return 0
		case event <= 0:
			pass = t.signalStop(ws) // the program's: delivered now
		}
	}
}

// stepTrapQueued reports whether tid has a single-step trap (si_code
// TRAP_TRACE, or TRAP_BRKPT after a system call) queued and not yet
// delivered. A SIGTRAP the program raised has other codes and is kept.
func stepTrapQueued(tid int) bool {
	args := struct {
		off   uint64
		flags uint32
		nr    int32
	}{0, 0, 8} // flags 0: the thread's own queue, where a trap goes
	var infos [8][128]byte
	n, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_PEEKSIGINFO, uintptr(tid),
		uintptr(unsafe.Pointer(&args)), uintptr(unsafe.Pointer(&infos[0][0])), 0, 0)
	if e != 0 {
		return false
	}
	for i := 0; i < int(n) && i < len(infos); i++ {
		signo := int32(binary.LittleEndian.Uint32(infos[i][0:]))
		code := int32(binary.LittleEndian.Uint32(infos[i][8:]))
		if signo == int32(unix.SIGTRAP) && (code == trapBrkpt || code == trapTrace || code == trapHWBkpt) {
			return true
		}
	}
	return false
}

// step accounts one single-step stop of a stepping thread at newIP.
func (t *Tracer) step(th *thread, regs *unix.PtraceRegs) {
	newIP := regs.Rip
	if th.noExec {
		th.noExec = false
		if code, err := getSiginfoCode(th.tid); err == nil && code == trapBrkpt {
			// The first trap after stepping was turned on inside a
			// system call (exec) comes before any instruction runs.
			th.ip, th.rcx = newIP, regs.Rcx
			return
		}
	}
	prev := th.ip
	in := th.cur
	if th.sysret && newIP == prev && !in.Rep && in.Kind != x86branch.KindJump {
		// No progress after a system call: a trap, not an instruction
		// (a jump to itself or a rep iteration would be one).
		th.rcx = regs.Rcx
		return
	}
	th.sysret = in.Kind == x86branch.KindSyscall
	th.lastOff = uint32(prev - th.start)
	th.count++
	th.ip = newIP
	t.stats.Instructions++
	rcx := th.rcx
	th.rcx = regs.Rcx
	switch {
	case in.Kind == x86branch.KindSyscall:
		dur := t.now() - th.tStep
		if dur > 0xffffffff {
			dur = 0xffffffff
		}
		t.stats.Syscalls++
		// rt_sigreturn restores the interrupted context and sets orig_rax
		// to -1 (no system call to restart): after its step that, not its
		// number, is what the registers show.
		nr := regs.Orig_rax
		if (nr == unix.SYS_RT_SIGRETURN || int64(nr) == -1) && th.handlers > 0 {
			th.handlers--
			nr = unix.SYS_RT_SIGRETURN
		}
		t.endBlock(th, trace.MajorITraceK, trace.ITraceSyscall, newIP, nr&0xffffffff, dur)
	case in.Kind == x86branch.KindCall || in.Kind == x86branch.KindReturn || in.Kind == x86branch.KindIret:
		t.verifyEnd(th, regs, prev, in.Kind, false)
		t.endBlock(th, trace.MajorITraceU, in.Kind.Minor(), newIP)
	case in.Rep && newIP == prev:
		// one more iteration of a rep string instruction
	case in.Rep && newIP == prev+uint64(in.Len) && rcx != 0:
		// The last iteration of a rep string instruction. Callgrind
		// counts the instruction once per iteration plus once for the
		// check that ends it (n+1); single-step traps n times.
		th.count++
		t.stats.Instructions++
	case in.Kind == x86branch.KindPlain && newIP != prev+uint64(in.Len) && th.as.dec.Insn(th.read, prev).Emulated:
		// Not at the fall-through of a cpuid: the hypervisor that
		// emulated it lost the trap after it, the next ones ran too.
		if end, ok := th.as.dec.Overran(th.read, prev, newIP); ok {
			end = t.resolve(th, th.as.dec.Block(th.read, prev), end, regs)
			t.stats.LostTraps++
			th.count += end.N - 1
			th.lastOff = uint32(end.Last - th.start)
			t.stats.Instructions += uint64(end.N - 1)
			if end.How == x86branch.Taken {
				t.verifyEnd(th, regs, end.Last, end.Kind, end.NoBranch)
				if end.NoBranch {
					break
				}
				t.endBlock(th, trace.MajorITraceU, end.Kind.Minor(), newIP)
			}
		}
	case in.Kind == x86branch.KindPlain:
		// Fall-through: an instruction that transfers no control goes on
		// at the next one (a length x86asm got wrong must not make a branch).
	case in.Len != 0 && newIP == prev+uint64(in.Len):
		// a conditional jump not taken, or a jump to the next
		// instruction (a block step stops there: no branch either)
		if th.vblk != nil && !th.as.dec.Insn(th.read, prev).Cond {
			t.verifyEnd(th, regs, prev, in.Kind, true)
		}
	case in.Kind == x86branch.KindUndecodable && newIP > prev && newIP <= prev+15:
		// AVX/AVX-512 and other encodings x86asm does not know never
		// branch: the next ip is their fall-through.
	default:
		t.verifyEnd(th, regs, prev, in.Kind, false)
		t.endBlock(th, trace.MajorITraceU, in.Kind.Minor(), newIP)
	}
}

func (t *Tracer) loop() error {
	var regs unix.PtraceRegs
	flush := func() {
		t.mu.Lock()
		t.stats.Records = t.nrec
		t.mu.Unlock()
	}
	defer flush()
	stopping := false
	for len(t.threads) > 0 {
		if max := t.opts.MaxInsns; max > 0 && !stopping && t.insns() >= max {
			t.mu.Lock()
			t.stats.LimitReached = true
			t.mu.Unlock()
			t.stop.Store(true)
		}
		if t.stop.Load() && !stopping {
			stopping = true
			for _, th := range t.threads {
				if th.running {
					_, _, _ = unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_INTERRUPT, uintptr(th.tid), 0, 0, 0, 0)
				} else if th.handlers > 0 {
					_ = t.resume(th, 0)
				} else {
					t.detach(th, 0, trace.ITraceEndOff)
				}
			}
			continue
		}
		var ws unix.WaitStatus
		tid, err := unix.Wait4(-1, &ws, unix.WALL|unix.WNOTHREAD, nil)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if errors.Is(err, unix.ECHILD) {
				for id := range t.threads {
					t.drop(id)
				}
				return nil
			}
			return fmt.Errorf("itrace: wait: %w", err)
		}
		if t.nrec&4095 == 0 {
			flush()
		}
		th := t.threads[tid]
		if th == nil {
			// A new thread's first stop can come before its creator's
			// clone event: take it now.
			if !ws.Stopped() {
				continue
			}
			over := t.full()
			th = t.addThread(tid, t.pidOf(tid), false)
			th.running = true
			if over {
				th.detach = true
				t.earlyOut[tid] = true
			} else if err := unix.PtraceGetRegs(tid, &regs); err == nil {
				t.startThread(th, regs.Rip, 0)
			}
		}
		th.running = false
		req := th.req
		th.req = 0
		if again, err := t.renotified(th, ws, req, stopping); again {
			if err != nil {
				return err
			}
			continue
		}
		if th.rep.Addr != 0 {
			trap := ws.Stopped() && ws.StopSignal() == unix.SIGTRAP && ws.TrapCause() == 0
			if !ws.Stopped() || unix.PtraceGetRegs(tid, &regs) != nil {
				th.rep.Addr = 0
				t.stats.BlocksLost++ // the thread died in the rep
			} else if end := th.rep.Next(); t.repDone(th, regs.Rip, regs.Rcx) && trap && regs.Rip == end {
				t.stats.BreakpointStops++
				th.sysret = false
				th.before, th.regs = true, regs
				if err := t.goOn(th, &stopping); err != nil {
					return err
				}
				continue
			} else if trap {
				if err := t.resume(th, 0); err != nil { // a SIGTRAP sent to the thread: dropped
					return err
				}
				continue
			}
		}
		if th.run != nil || th.hwProbe {
			// A breakpoint run or probe ended: by its breakpoint, or cut.
			trap := ws.Stopped() && ws.StopSignal() == unix.SIGTRAP && ws.TrapCause() == 0
			gotRegs := ws.Stopped() && unix.PtraceGetRegs(tid, &regs) == nil
			if th.hwProbe {
				if trap && gotRegs && t.probed(th, &regs) {
					th.before, th.regs = true, regs
					if err := t.resume(th, 0); err != nil {
						return err
					}
					continue
				}
				th.hwProbe = false
				t.disarm(th) // and the stop is handled as a single step's
			} else {
				switch {
				case !gotRegs:
					t.unplan(th)
					t.stats.BlocksLost++ // the thread died in the line
				case trap && t.stopped(th, &regs):
					if err := t.goOn(th, &stopping); err != nil {
						return err
					}
					continue
				default:
					t.bpCut(th, &regs) // then handled as any such stop
					if trap {
						// a SIGTRAP sent to the thread: dropped, as
						// single-stepping does
						if err := t.resume(th, 0); err != nil {
							return err
						}
						continue
					}
				}
			}
		}
		if th.block {
			// A block step ended: by its trap, or cut short.
			th.block = false
			trap := ws.Stopped() && ws.StopSignal() == unix.SIGTRAP && ws.TrapCause() == 0
			gotRegs := ws.Stopped() && unix.PtraceGetRegs(tid, &regs) == nil
			switch {
			case !gotRegs:
				t.stats.BlocksLost++ // the thread died in the block
			case !trap:
				t.blockCut(th, regs.Rip) // then handled as any such stop
			default:
				if t.opts.emulateBTF && t.fellThrough(th, regs.Rip) {
					if !t.stop.Load() {
						// no trap at a fall-through: step on silently
						th.emuIP, th.block, th.running = regs.Rip, true, true
						if err := t.cont(th, unix.PTRACE_SINGLESTEP, 0); err != nil && !errors.Is(err, unix.ESRCH) {
							return fmt.Errorf("itrace: resume thread %d: %w", tid, err)
						}
						continue
					}
					t.blockCut(th, regs.Rip)
				} else {
					t.blockTrap(th, &regs)
				}
				// The trap is accounted: resume, or let go when stopping.
				if err := t.goOn(th, &stopping); err != nil {
					return err
				}
				continue
			}
		}
		if ws.Exited() || ws.Signaled() {
			if th.stepping && th.cur.Kind == x86branch.KindSyscall && ws.Exited() {
				// The exit system call ran and did not return.
				th.lastOff = uint32(th.ip - th.start)
				th.count++
				t.stats.Instructions++
			}
			t.endThread(th, trace.ITraceEndExit)
			t.drop(tid)
			continue
		}
		if !ws.Stopped() {
			continue
		}
		sig := int(ws.StopSignal())
		event := ws.TrapCause()
		if stopping || t.stop.Load() {
			stopping = true
			if th.handlers > 0 && th.stepping {
				// Inside a signal handler the signal frame holds the
				// flags with the trap flag set: detached there, the
				// thread would take a SIGTRAP at rt_sigreturn. Step it
				// out of its handlers first.
				if event <= 0 && sig == int(unix.SIGURG) {
					_ = t.resume(th, 0) // the wake-up of Stop
					continue
				}
				if err := t.handleStop(th, sig, event, &regs); err != nil {
					return err
				}
				continue
			}
			pass := 0
			if event <= 0 && sig != int(unix.SIGTRAP) && sig != int(unix.SIGURG) && sig != int(unix.SIGSTOP) {
				pass = sig
			}
			if event == unix.PTRACE_EVENT_VFORK {
				t.detachAtCreation(th, pass, event)
				continue
			}
			if isCreation(event) {
				// The new thread is ours already (PTRACE_O_TRACECLONE).
				t.letChildGo(th, event)
			}
			t.detach(th, pass, trace.ITraceEndOff)
			continue
		}
		if err := t.handleStop(th, sig, event, &regs); err != nil {
			return err
		}
	}
	return nil
}

// fellThrough accounts the emulated block step's last single step (from
// th.emuIP to ip) and reports whether it ran no taken branch (an
// instruction that does not branch, a conditional jump not taken): BTF
// would not have trapped.
func (t *Tracer) fellThrough(th *thread, ip uint64) bool {
	in := th.as.dec.Insn(th.read, th.emuIP)
	if in.Emulated && ip != in.Next() {
		if end, ok := th.as.dec.Overran(th.read, th.emuIP, ip); ok {
			th.emuN += end.N
			th.emuLast = end.Last
			return end.How != x86branch.Taken
		}
	}
	th.emuN++
	th.emuLast = th.emuIP
	return ip == in.Next() && !in.Transfers()
}

func (t *Tracer) handleStop(th *thread, sig, event int, regs *unix.PtraceRegs) error {
	tid := th.tid
	// The first stop of a thread traced from attach starts its stepping:
	// the attach stop, or a signal or fork that came first (a stopped
	// process's SIGCONT), so that a fork's child is followed. An exec
	// starts it below (with its flag); a SIGTRAP before stepping is the
	// program's.
	begin := !th.stepping && th.startOn && !th.detach
	if event == unix.PTRACE_EVENT_EXEC || sig == int(unix.SIGTRAP) && event == 0 {
		begin = false
	}
	if begin {
		if err := unix.PtraceGetRegs(tid, regs); err != nil {
			return nil
		}
		ip := regs.Rip
		if int64(regs.Orig_rax) >= 0 && int64(regs.Rax) >= -516 && int64(regs.Rax) <= -512 {
			// Stopped in an interrupted system call: the kernel
			// restarts it, from its syscall instruction, on resume.
			ip -= 2
		}
		t.startThread(th, ip, 0)
		th.rcx = regs.Rcx
	}
	if !(sig == int(unix.SIGTRAP) && event == 0) {
		t.verifyCut(th) // a stop that is not a step's trap cuts the block
	}
	switch {
	case sig == int(unix.SIGTRAP) && event > 0 && event != unix.PTRACE_EVENT_STOP:
		// clone / fork / vfork / exec event: inside the system call, no
		// instruction ran since the last stop.
		switch event {
		case unix.PTRACE_EVENT_CLONE, unix.PTRACE_EVENT_FORK, unix.PTRACE_EVENT_VFORK:
			if child, pid, ok := t.newChild(th, event); ok {
				over := t.full()
				c := t.addChild(child, pid, event)
				c.startOn = th.stepping && !over // starts at its first stop
				c.detach = !th.stepping || over
			}
		case unix.PTRACE_EVENT_EXEC:
			// The address space is new; the old pid's cache goes.
			if msg, err := unix.PtraceGetEventMsg(tid); err == nil && int(msg) != tid {
				// A non-leader thread exec'd: it took the leader's tid.
				if old := t.threads[int(msg)]; old != nil && old != th {
					t.drop(old.tid)
				}
			}
			delete(t.spaces, th.pid)
			th.as = t.space(th.pid)
			// exec clears the debug registers
			th.dr7, th.dr0, th.dr1, th.before = 0, 0, 0, false
			th.via, th.run, th.fork, th.pre.Addr = th.via[:0], nil, false, 0
			th.rep.Addr = 0
			if !th.stepping {
				if err := unix.PtraceGetRegs(tid, regs); err != nil {
					return nil
				}
				t.startThread(th, regs.Rip, trace.ITraceStartExec)
				th.rcx = regs.Rcx
				th.noExec = true
			}
		}
		return t.resume(th, 0)
	case event == unix.PTRACE_EVENT_STOP:
		// Attach stop, new thread's first stop, or a group stop: no
		// instruction ran. Job control stops are not honoured while traced.
		if th.detach {
			t.detach(th, 0, trace.ITraceEndOff)
			return nil
		}
		return t.resume(th, 0)
	case sig == int(unix.SIGTRAP):
		if !th.stepping {
			return t.resume(th, 0)
		}
		if err := unix.PtraceGetRegs(tid, regs); err != nil {
			return nil // gone
		}
		if th.injected != 0 {
			signo := th.injected
			th.injected = 0
			t.stats.Signals++
			if info, err := getSiginfoCode(tid); err == nil && info == int32(unix.SIGTRAP) {
				// The kernel set up the handler's frame and stopped
				// before its first instruction.
				t.endBlock(th, trace.MajorITraceK, trace.ITraceSignal, regs.Rip, uint64(signo), trace.ITraceSignalHandler)
				th.handlers++
				th.ip, th.rcx = regs.Rip, regs.Rcx
				return t.resume(th, 0)
			}
			// No handler: the instruction ran; the signal is one record.
			t.endBlock(th, trace.MajorITraceK, trace.ITraceSignal, th.ip, uint64(signo), 0)
		}
		t.step(th, regs)
		return t.resume(th, 0)
	default:
		// Signal-delivery stop: nothing ran; deliver the signal.
		if !th.stepping {
			return t.resume(th, sig)
		}
		return t.resume(th, sig)
	}
}

// trapBrkpt is si_code TRAP_BRKPT: x86 reports a step out of a system call
// with it (a single-step trap proper is TRAP_TRACE).
const (
	trapBrkpt = 1
	trapTrace = 2
)

// getSiginfoCode returns si_code of the last stop's siginfo.
func getSiginfoCode(tid int) (int32, error) {
	var info [128]byte
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_GETSIGINFO, uintptr(tid), 0, uintptr(unsafe.Pointer(&info[0])), 0, 0); e != 0 {
		return 0, e
	}
	// struct siginfo: si_signo, si_errno, si_code (int each).
	return int32(uint32(info[8]) | uint32(info[9])<<8 | uint32(info[10])<<16 | uint32(info[11])<<24), nil
}

// insns is the user instructions traced so far; only the tracer's own
// goroutine (which counts them) calls it.
func (t *Tracer) insns() uint64 { return t.stats.Instructions }
