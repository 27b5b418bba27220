package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/a2n"
	"perfinsp/libperfutil/uprobe"
)

// The probe cost is measured, not assumed: hotspot starts a copy of itself
// (calibEnv set) that calls calibLeaf in batches on one locked thread and
// prints the thread's CPU time per batch; hotspot runs the batches without
// and with an entry probe (8-byte stack sample, as the walk's) plus a
// return probe on calibLeaf. The difference per call is what a probed call
// costs the thread that makes it: the two traps and the samples written.
//
// The child is Go, so the return probe must not be seen by the Go runtime:
// calibLeaf is a nosplit leaf (no stack check, no call, no traceback while
// the return address is the kernel's trampoline), the child runs with
// asynchronous preemption off and the collector off (it allocates almost
// nothing), so no stack is scanned while it is inside.
const calibEnv = "HOTSPOT_CALIBRATION_CHILD"

//go:noinline
//go:nosplit
func calibLeaf(x uint64) uint64 { return x*2654435761 + 1 }

// calibrationChild is the child's main: it prints "TID ADDR" (its thread
// and calibLeaf's address), then for each number N read from stdin calls
// calibLeaf N times and prints the thread CPU nanoseconds it took.
func calibrationChild(in io.Reader, out io.Writer) int {
	runtime.LockOSThread()
	fmt.Fprintf(out, "%d %d\n", unix.Gettid(), reflect.ValueOf(calibLeaf).Pointer())
	sc := bufio.NewScanner(in)
	var s uint64
	for sc.Scan() {
		n, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
		if err != nil || n <= 0 {
			return 0
		}
		t0 := threadCPU()
		for i := 0; i < n; i++ {
			s = calibLeaf(s)
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
	// costs the calling thread, beyond the call itself (best of Rounds).
	CallNs float64 `json:"cost_per_probed_call_ns"`
	Calls  int     `json:"calls_per_round"`
	Rounds int     `json:"rounds"`
	// Spread is the largest minus the smallest per-call cost of the rounds.
	SpreadNs float64 `json:"spread_ns"`
}

// calibrate measures the cost of a probed call on this machine.
func calibrate(pmu uprobe.PMU) (Calibration, error) {
	const calls, rounds = 1000, 3
	self, err := os.Executable()
	if err != nil {
		return Calibration{}, fmt.Errorf("calibrate the probe cost: %w", err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), calibEnv+"=1", "GODEBUG=asyncpreemptoff=1", "GOGC=off", "GOMAXPROCS=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return Calibration{}, fmt.Errorf("calibrate the probe cost: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return Calibration{}, fmt.Errorf("calibrate the probe cost: %w", err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return Calibration{}, fmt.Errorf("calibrate the probe cost: start %s: %w", self, err)
	}
	defer func() {
		stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	lines := bufio.NewScanner(stdout)
	readTwo := func() (int64, int64, error) {
		if !lines.Scan() {
			return 0, 0, errors.New("the calibration child ended early")
		}
		f := strings.Fields(lines.Text())
		if len(f) != 2 {
			return 0, 0, fmt.Errorf("calibration child said %q", lines.Text())
		}
		a, err1 := strconv.ParseInt(f[0], 10, 64)
		b, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, 0, fmt.Errorf("calibration child said %q", lines.Text())
		}
		return a, b, nil
	}
	tid, addr, err := readTwo()
	if err != nil {
		return Calibration{}, fmt.Errorf("calibrate the probe cost: %w", err)
	}
	var cache a2n.Cache
	pm, err := newProcMap(cmd.Process.Pid, &cache)
	if err != nil {
		return Calibration{}, fmt.Errorf("calibrate the probe cost: %w", err)
	}
	path, off, ok := pm.fileOffset(uint64(addr))
	if !ok {
		return Calibration{}, fmt.Errorf("calibrate the probe cost: calibLeaf at %#x is in no file mapping of process %d", addr, cmd.Process.Pid)
	}
	batch := func(n int) (int64, error) {
		if _, err := fmt.Fprintln(stdin, n); err != nil {
			return 0, err
		}
		ns, _, err := readTwo()
		return ns, err
	}
	// A probe's breakpoint is in place from its open to its close (a
	// disabled perf event still traps): the plain batches run with no probe
	// open at all, each probed batch with a fresh pair.
	var probes []*uprobe.Probe
	var ring *uprobe.Ring
	closeProbes := func() {
		ring.Close()
		ring = nil
		for _, p := range probes {
			p.Close()
		}
		probes = nil
	}
	defer closeProbes()
	probed := func(n int) (int64, error) {
		defer closeProbes()
		for _, ret := range []bool{false, true} {
			p, err := pmu.Open(path, off, ret, int(tid), true)
			if err != nil {
				return 0, err
			}
			probes = append(probes, p)
			if ring == nil {
				if ring, err = uprobe.NewRing(p.FD, 128); err != nil {
					return 0, err
				}
			} else if err := ring.Redirect(p.FD); err != nil {
				return 0, err
			}
		}
		for _, p := range probes {
			if err := uprobe.Enable(p.FD); err != nil {
				return 0, err
			}
		}
		ns, err := batch(n)
		if err != nil {
			return 0, err
		}
		hits := 0
		ring.Drain(func(typ uint32, _ uint16, _ []byte) {
			if typ == unix.PERF_RECORD_SAMPLE {
				hits++
			}
		})
		if hits+int(ring.Lost) != 2*n {
			return 0, fmt.Errorf("%d probe hits for %d calls, want %d (lost %d)", hits, n, 2*n, ring.Lost)
		}
		return ns, nil
	}
	// Warm up (the first hits map the kernel's trampoline page).
	if _, err := probed(20); err != nil {
		return Calibration{}, fmt.Errorf("calibrate the probe cost: %w", err)
	}
	var plain, withProbes []float64
	for r := 0; r < rounds; r++ {
		ns, err := batch(calls)
		if err != nil {
			return Calibration{}, fmt.Errorf("calibrate the probe cost: %w", err)
		}
		plain = append(plain, float64(ns)/float64(calls))
		if ns, err = probed(calls); err != nil {
			return Calibration{}, fmt.Errorf("calibrate the probe cost: %w", err)
		}
		withProbes = append(withProbes, float64(ns)/float64(calls))
	}
	sort.Float64s(plain)
	sort.Float64s(withProbes)
	c := Calibration{CallNs: withProbes[0] - plain[0], Calls: calls, Rounds: rounds, SpreadNs: withProbes[rounds-1] - withProbes[0]}
	if c.CallNs <= 0 {
		return Calibration{}, fmt.Errorf("calibrate the probe cost: probed calls measured no slower than plain ones (%.0f vs %.0f ns)", withProbes[0], plain[0])
	}
	return c, nil
}

// cpuTimeNs is the CPU time (ns) the threads tids have used so far
// (/proc/TID/schedstat: on-CPU time, ns); threads gone are left out.
func cpuTimeNs(tids []int) uint64 {
	var sum uint64
	for _, tid := range tids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/schedstat")
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			if v, err := strconv.ParseUint(f[0], 10, 64); err == nil {
				sum += v
			}
		}
	}
	return sum
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times (100 on Linux).
const clockTicks = 100
