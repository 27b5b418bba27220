package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"perfinsp/analysis/a2n"
	"perfinsp/internal/perfring"
	"perfinsp/libperfutil/uprobe"
)

// The probe cost is measured, not assumed: hotspot starts a copy of itself
// (calibEnv set) that calls a function in batches on one locked thread and
// prints the thread's CPU time per batch; hotspot runs the batches without
// and with the walk's probes on that function: an entry probe (8-byte
// stack sample and the registers, as the walk's) and a probe on its return
// instruction. The difference per call is what a probed call costs the
// thread that makes it: the traps and the samples written.
//
// Two functions, because the kernel handles an entry probe in two ways:
// it emulates a few first instructions (push of a register — the frame
// pointer prologue of most compiled functions — jumps, calls, nops) in the
// trap, and executes any other one out of line with a second, single-step
// trap, which can cost several times as much (in a VM). calibLeaf starts
// with a MOVL (out of line), calibPush with PUSHQ BP (emulated); the walk
// charges each probed function the cost of its own first instruction. A
// return instruction is always run out of line.
//
// The child runs with asynchronous preemption and the collector off and
// the functions are nosplit, so that the batches measure the calls only.
const calibEnv = "HOTSPOT_CALIBRATION_CHILD"

//go:noinline
//go:nosplit
func calibLeaf(x uint64) uint64 { return x*2654435761 + 1 }

//go:noinline
//go:nosplit
func calibPush(x uint64) uint64 { return calibLeaf(x) + 1 }

// calibrationChild is the child's main: it prints "TID LEAF PUSH" (its
// thread, the two functions' addresses), then for each line "N KIND" read
// from stdin calls calibLeaf (KIND 0) or calibPush (1) N times and prints
// the thread CPU nanoseconds it took.
func calibrationChild(in io.Reader, out io.Writer) int {
	runtime.LockOSThread()
	fmt.Fprintf(out, "%d %d %d\n", unix.Gettid(), reflect.ValueOf(calibLeaf).Pointer(), reflect.ValueOf(calibPush).Pointer())
	sc := bufio.NewScanner(in)
	var s uint64
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			return 0
		}
		n, err := strconv.Atoi(f[0])
		if err != nil || n <= 0 {
			return 0
		}
		t0 := threadCPU()
		if f[1] == "1" {
			for i := 0; i < n; i++ {
				s = calibPush(s)
			}
		} else {
			for i := 0; i < n; i++ {
				s = calibLeaf(s)
			}
		}
		t1 := threadCPU()
		fmt.Fprintf(out, "%d %d\n", t1-t0, s&1)
	}
	return 0
}

func threadCPU() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return ts.Nano()
}

// Calibration is the measured cost of one probed call.
type Calibration struct {
	// CallNs is the CPU time one call with an entry and a return probe
	// costs the calling thread, beyond the call itself (best of Rounds),
	// when the first instruction runs out of line (single-stepped).
	CallNs float64 `json:"cost_per_probed_call_ns"`
	// EmulatedNs: the same when the kernel emulates the first
	// instruction (push of a register: a frame pointer prologue). 0: not
	// measured (CallNs is used for every function).
	EmulatedNs float64 `json:"cost_per_probed_call_emulated_ns"`
	// EntryNs, EntryEmulatedNs: the cost of a call with its entry probe
	// alone (of each kind), what a call costs while the return probe is
	// already closed and the entry probe not yet (hits while closing).
	EntryNs         float64 `json:"cost_per_entry_hit_ns"`
	EntryEmulatedNs float64 `json:"cost_per_entry_hit_emulated_ns"`
	Calls           int     `json:"calls_per_round"`
	Rounds          int     `json:"rounds"`
	// Spread is the largest minus the smallest per-call cost of the rounds
	// (single-stepped kind).
	SpreadNs float64 `json:"spread_ns"`
	// SampleNs is the CPU time one sample of the sampling step costs the
	// sampled thread (the timer interrupt and the record): batches of
	// ~10 ms of calls without and with the sampler at calibSampleHz,
	// best of Rounds each, the difference per sample. 0: none measured.
	SampleNs float64 `json:"cost_per_sample_ns"`
	// InPairNs is the probes' own time between a call's entry sample and
	// its exit sample (the rest of the entry trap, the single step of the
	// first instruction, the exit trap up to its sample): the median of
	// exit − entry over the probed calls of a function that does almost
	// nothing. It is taken out of every measured call. InPairEmulatedNs:
	// the same with an emulated first instruction.
	InPairNs         float64 `json:"probe_time_in_call_ns"`
	InPairEmulatedNs float64 `json:"probe_time_in_call_emulated_ns"`
	// CloseNs is the time the close of one probe took (a kernel grace
	// period for a probe of the uprobe PMU, far less for one held by a
	// dynamic event, as the walk's): the budget's guess for a closing
	// phase before the walk's own closes are timed.
	CloseNs float64 `json:"probe_close_ns"`
}

// inPair is the probes' own time inside a pair of the function at
// path+off (Calibration.InPairNs, by its kind of first instruction).
func (c Calibration) inPair(path string, off uint64) float64 {
	if c.EmulatedNs > 0 && entryEmulated(path, off) {
		return c.InPairEmulatedNs
	}
	return c.InPairNs
}

// calibSampleHz is the sampler's rate while its cost is measured: high,
// so that a 10 ms batch holds 100 samples.
const calibSampleHz = 10000

// cost is what a probed call of the function at path+off costs, and a
// call with its entry probe alone.
func (c Calibration) cost(path string, off uint64) (call, entry float64) {
	if c.EmulatedNs > 0 && entryEmulated(path, off) {
		return c.EmulatedNs, c.EntryEmulatedNs
	}
	return c.CallNs, c.EntryNs
}

// entryEmulated says whether the instruction at path+off is one the x86
// kernel emulates in the uprobe trap (no single step): push of a register
// (50+r, or REX.B 41 50+r). Unreadable: no (the dearer cost).
func entryEmulated(path string, off uint64) bool {
	if runtime.GOARCH != "amd64" {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [2]byte
	if n, _ := f.ReadAt(b[:], int64(off)); n < 2 {
		return false
	}
	return b[0]>>3 == 0x50>>3 || (b[0] == 0x41 && b[1]>>3 == 0x50>>3)
}

// The calibration's batches: calibCalls calls each, the best of
// calibRounds.
const calibCalls, calibRounds = 1000, 3

// calibrate measures the cost of a sample, starts between(the cost per
// sample, 0 if not measured) — the sampling step, which needs it — and
// meanwhile measures the cost of a probed call; it returns once both are
// done. between is called exactly once, also when the calibration fails
// before it. When only the probes cannot be measured (no CAP_PERFMON),
// the sample's cost is returned with the error.
func calibrate(pmu uprobe.PMU, between func(sampleNs float64)) (c Calibration, err error) {
	var done chan struct{} // closed when between has returned
	defer func() {
		if done == nil {
			between(c.SampleNs)
		} else {
			<-done
		}
	}()
	fail := func(err error) (Calibration, error) {
		return Calibration{}, fmt.Errorf("calibrate the probe cost: %w", err)
	}
	ch, err := startCalibChild()
	if err != nil {
		return fail(err)
	}
	defer ch.stop()
	defer ch.closing.Wait()
	c = Calibration{Calls: calibCalls, Rounds: calibRounds}
	if c.SampleNs, err = ch.sampleCost(); err != nil {
		return fail(err)
	}
	// The sampling step runs while the probe costs are measured (in the
	// child, a process of its own: the target's sampling does not see it).
	done = make(chan struct{})
	go func(sampleNs float64) {
		defer close(done)
		between(sampleNs)
	}(c.SampleNs)
	k, err := ch.measure(pmu, 0)
	if err != nil {
		return c, fmt.Errorf("calibrate the probe cost: %w", err)
	}
	c.CallNs, c.EntryNs, c.SpreadNs, c.InPairNs, c.CloseNs = k.cost, k.entry, k.spread, k.inPair, k.closeNs
	if entryEmulated(ch.fn[1].path, ch.fn[1].off) && !entryEmulated(ch.fn[0].path, ch.fn[0].off) {
		k, err := ch.measure(pmu, 1)
		if err != nil {
			return c, fmt.Errorf("calibrate the probe cost: %w", err)
		}
		// Noise: never charge less for the dearer kind.
		c.EmulatedNs = min(k.cost, c.CallNs)
		c.EntryEmulatedNs = min(k.entry, c.EmulatedNs)
		c.InPairEmulatedNs = k.inPair
	}
	return c, nil
}

// calibTarget is one of the child's functions: where it is and its
// exit (the walk's exit probe: exits.go).
type calibTarget struct {
	path  string
	off   uint64
	exits []uint64
}

// calibChild is the copy of hotspot the calibration measures
// (calibrationChild): its thread, its two functions, the pipes to it.
type calibChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
	tid   int
	fn    [2]calibTarget // calibLeaf, calibPush
	// closing: the probes' closes (probedPair.close), waited for before
	// the walk's first level (each anchor's close holds the kernel's
	// lock of every probe close across a grace period).
	closing sync.WaitGroup
}

// startCalibChild starts the child and finds its functions in its files.
func startCalibChild() (*calibChild, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), calibEnv+"=1", "GODEBUG=asyncpreemptoff=1", "GOGC=off", "GOMAXPROCS=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	// A process group of its own: Ctrl-C at the terminal is hotspot's to
	// handle (a report of what was seen), not the end of its measurement;
	// hotspot ends the child itself (stop), and the child ends at its
	// stdin's end if hotspot dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", self, err)
	}
	ch := &calibChild{cmd: cmd, stdin: stdin, lines: bufio.NewScanner(stdout)}
	if err := ch.locate(); err != nil {
		ch.stop()
		return nil, err
	}
	return ch, nil
}

// locate reads the child's first line (its thread, the two functions'
// addresses) and finds each function's file offset and exit.
func (ch *calibChild) locate() error {
	hello, err := ch.readInts(3)
	if err != nil {
		return err
	}
	ch.tid = int(hello[0])
	pid := ch.cmd.Process.Pid
	var cache a2n.Cache
	pm, err := newProcMap(pid, &cache)
	if err != nil {
		return err
	}
	for k := range ch.fn {
		addr := uint64(hello[1+k])
		path, off, ok := pm.fileOffset(addr)
		if !ok {
			return fmt.Errorf("function at %#x is in no file mapping of process %d", addr, pid)
		}
		f := pm.lookup(addr)
		if f.Off != off {
			return fmt.Errorf("function at %#x of process %d: no symbol starts there", addr, pid)
		}
		plan := findExits(path, off, f.Size)
		if len(plan.Offs) != 1 {
			return fmt.Errorf("%s: want one exit, found %d (%s)", f.Name, len(plan.Offs), plan.Why)
		}
		ch.fn[k] = calibTarget{path, off, plan.Offs}
	}
	return nil
}

// stop ends the child.
func (ch *calibChild) stop() {
	ch.stdin.Close()
	_ = ch.cmd.Process.Kill()
	_ = ch.cmd.Wait()
}

// readInts reads a line of n integers from the child.
func (ch *calibChild) readInts(n int) ([]int64, error) {
	if !ch.lines.Scan() {
		return nil, errors.New("the calibration child ended early")
	}
	f := strings.Fields(ch.lines.Text())
	if len(f) != n {
		return nil, fmt.Errorf("calibration child said %q", ch.lines.Text())
	}
	out := make([]int64, n)
	for i := range f {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("calibration child said %q", ch.lines.Text())
		}
		out[i] = v
	}
	return out, nil
}

// batch has the child call function kind n times; the thread CPU time
// it took (ns).
func (ch *calibChild) batch(n, kind int) (int64, error) {
	if _, err := fmt.Fprintln(ch.stdin, n, kind); err != nil {
		return 0, err
	}
	v, err := ch.readInts(2)
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

// sampleCost is the CPU time one sample costs the sampled thread:
// batches of ~10 ms of calls without and with the sampler at
// calibSampleHz, the best of calibRounds each, the difference per
// sample (0 if none was measured).
func (ch *calibChild) sampleCost() (float64, error) {
	ns, err := ch.batch(100000, 0)
	if err != nil {
		return 0, err
	}
	n := int(min(max(100000*10e6/float64(max(ns, 1)), 1000), 1e9))
	bestPlain, bestSampled, samples := int64(math.MaxInt64), int64(math.MaxInt64), 0
	for r := 0; r < calibRounds; r++ {
		ns, err := ch.batch(n, 0)
		if err != nil {
			return 0, err
		}
		bestPlain = min(bestPlain, ns)
		sns, k, err := ch.sampled(n)
		if err != nil {
			return 0, fmt.Errorf("the cost of a sample: %w", err)
		}
		if sns < bestSampled {
			bestSampled, samples = sns, k
		}
	}
	if samples > 0 && bestSampled > bestPlain {
		return float64(bestSampled-bestPlain) / float64(samples), nil
	}
	return 0, nil
}

// sampled is a batch of n calls with the sampler on the child's thread:
// its CPU time and the samples taken (or lost).
func (ch *calibChild) sampled(n int) (int64, int, error) {
	fd, err := openSampler(ch.tid, 1e9/calibSampleHz)
	if err != nil {
		return 0, 0, err
	}
	defer unix.Close(fd)
	ring, err := perfring.Map(fd, 16)
	if err != nil {
		return 0, 0, err
	}
	defer ring.Close()
	ns, err := ch.batch(n, 0)
	samples := 0
	ring.Drain(func(typ uint32, _ uint16, _ []byte) {
		if typ == unix.PERF_RECORD_SAMPLE {
			samples++
		}
	})
	return ns, samples + int(ring.Lost), err
}

// kindCost is what the calibration found for one kind of first
// instruction (Calibration's fields of that kind).
type kindCost struct {
	cost, entry, spread, inPair, closeNs float64
}

// measure measures the probe cost of the child's function kind. A
// probe's breakpoint is in place from its open to its close (a disabled
// perf event still traps): the plain batches run with no probe open at
// all, then the probed batches with one pair (an entry probe and a probe
// on the return instruction, as the walk's; a close waits for a kernel
// grace period, so the pair is opened once per kind, not per batch). Then
// the exit probe is closed and the same batches run with the entry probe
// alone.
func (ch *calibChild) measure(pmu uprobe.PMU, kind int) (kindCost, error) {
	var plain, withProbes, entryOnly []float64
	for r := 0; r < calibRounds; r++ {
		ns, err := ch.batch(calibCalls, kind)
		if err != nil {
			return kindCost{}, err
		}
		plain = append(plain, float64(ns)/calibCalls)
	}
	pp := &probedPair{ch: ch, kind: kind, per: 2}
	defer pp.close()
	if err := pp.open(pmu); err != nil {
		return kindCost{}, err
	}
	// Warm up (the first hits map the kernel's trampoline page).
	if _, err := pp.batch(20); err != nil {
		return kindCost{}, err
	}
	for r := 0; r < calibRounds; r++ {
		ns, err := pp.batch(calibCalls)
		if err != nil {
			return kindCost{}, err
		}
		withProbes = append(withProbes, float64(ns)/calibCalls)
	}
	tc := time.Now()
	pp.probes[1].Close() // the exit probe (the ring is the entry probe's)
	closeNs := float64(time.Since(tc))
	pp.per = 1
	for r := 0; r < calibRounds; r++ {
		ns, err := pp.batch(calibCalls)
		if err != nil {
			return kindCost{}, err
		}
		entryOnly = append(entryOnly, float64(ns)/calibCalls)
	}
	sort.Float64s(plain)
	sort.Float64s(withProbes)
	sort.Float64s(entryOnly)
	if withProbes[0] <= plain[0] {
		return kindCost{}, fmt.Errorf("probed calls measured no slower than plain ones (%.0f vs %.0f ns)", withProbes[0], plain[0])
	}
	k := kindCost{cost: withProbes[0] - plain[0], spread: withProbes[calibRounds-1] - withProbes[0], closeNs: closeNs}
	k.entry = min(max(entryOnly[0]-plain[0], 0), k.cost)
	sort.Float64s(pp.pairs)
	if len(pp.pairs) > 0 {
		k.inPair = pp.pairs[len(pp.pairs)/2]
	}
	return k, nil
}

// probedPair is the calibration's probes on one function of the child:
// its entry probe, which holds the ring, and its exit probe.
type probedPair struct {
	ch     *calibChild
	kind   int
	probes []*uprobe.Probe
	dyn    *uprobe.Dynamic // as the walk's levels: its closes are the walk's
	ring   *perfring.Ring
	per    int       // hits per call: 2, or 1 once the exit probe is closed
	pairs  []float64 // exit − entry times of the calls (ns)
}

// open puts the probes on the function and enables them.
func (pp *probedPair) open(pmu uprobe.PMU) error {
	fn := pp.ch.fn[pp.kind]
	pp.dyn = openDynamic()
	for i, off := range append([]uint64{fn.off}, fn.exits...) {
		p, err := pmu.OpenWith(fn.path, off, false, pp.ch.tid, uprobe.OpenOpts{Disabled: true, Group: -1, Exit: i > 0, Regs: probeRegs, Dynamic: pp.dyn})
		if err != nil {
			return err
		}
		pp.probes = append(pp.probes, p)
		if pp.ring == nil {
			if pp.ring, err = perfring.Map(p.FD, 128); err != nil {
				return err
			}
		} else if err := pp.ring.Redirect(p.FD); err != nil {
			return err
		}
	}
	for _, p := range pp.probes {
		if err := uprobe.Enable(p.FD); err != nil {
			return err
		}
	}
	return nil
}

// close unmaps the ring and closes the probes, then their dynamic
// events, while the calibration goes on (an anchor's close waits for a
// kernel grace period; calibrate waits for them at its end).
func (pp *probedPair) close() {
	pp.ring.Close()
	pp.ch.closing.Add(1)
	go func(probes []*uprobe.Probe, dyn *uprobe.Dynamic) {
		defer pp.ch.closing.Done()
		for _, p := range probes {
			p.Close()
		}
		_ = dyn.Close()
	}(pp.probes, pp.dyn)
}

// batch runs n probed calls: every call must be hit per times (or the
// hits lost); the pairs' times are kept.
func (pp *probedPair) batch(n int) (int64, error) {
	ns, err := pp.ch.batch(n, pp.kind)
	if err != nil {
		return 0, err
	}
	hits, lost := 0, pp.ring.Lost
	var entryT uint64
	pp.ring.Drain(func(typ uint32, _ uint16, b []byte) {
		if typ != unix.PERF_RECORD_SAMPLE {
			return
		}
		hits++
		// The time from the entry's sample to the exit's, of a function
		// that does almost nothing: the probes' own time inside a pair.
		id, _ := uprobe.SampleID(b)
		entry := id == pp.probes[0].ID
		s, ok := uprobe.Decode(b, uprobe.Layout{Stack: entry, Regs: 1})
		switch {
		case !ok:
		case entry:
			entryT = s.Time
		case entryT != 0 && s.Time > entryT:
			pp.pairs = append(pp.pairs, float64(s.Time-entryT))
			entryT = 0
		}
	})
	if got := hits + int(pp.ring.Lost-lost); got != pp.per*n {
		return 0, fmt.Errorf("%d probe hits for %d calls, want %d (lost %d)", hits, n, pp.per*n, pp.ring.Lost-lost)
	}
	return ns, nil
}

// threadCPUNs is thread tid's CPU time so far (/proc/TID/schedstat, ns).
func threadCPUNs(tid int) (uint64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/schedstat")
	if err != nil {
		return 0, false
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		if v, err := strconv.ParseUint(f[0], 10, 64); err == nil {
			return v, true
		}
	}
	return 0, false
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times (100 on Linux).
const clockTicks = 100
