package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	"perfinsp/libperfutil/control"
)

func rdtsc() uint64

// getppidLoop makes n getppid system calls and returns the TSC delta.
func getppidLoop(n int) uint64 {
	t0 := rdtsc()
	for i := 0; i < n; i++ {
		unix.Syscall(unix.SYS_GETPPID, 0, 0, 0)
	}
	return rdtsc() - t0
}

// ioctlLoop makes n ioctls with the same request and argument.
func ioctlLoop(fd, req, a uintptr, n int) uint64 {
	t0 := rdtsc()
	for i := 0; i < n; i++ {
		unix.Syscall(unix.SYS_IOCTL, fd, req, a)
	}
	return rdtsc() - t0
}

func minOf(f func() uint64, reps int) uint64 {
	best := f()
	for i := 1; i < reps; i++ {
		if v := f(); v < best {
			best = v
		}
	}
	return best
}

// bench prints the per-record cost of the module's tprof and TraceHook
// paths and of perf's ring buffer for a tracepoint, in TSC ticks (guest
// instructions when QEMU runs with -icount shift=0,sleep=off).
func bench(args []string) error {
	n := 20000
	if len(args) > 0 {
		n, _ = strconv.Atoi(args[0])
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fac, err := control.Open("kmod")
	if err != nil {
		return err
	}
	defer fac.Close()
	_ = fac.Free()
	if err := fac.SetMode(control.ModeNormal, ""); err != nil {
		return err
	}
	if err := fac.Init(control.Config{TraceBufSize: 16 << 20, MTEBufSize: 1 << 20}); err != nil {
		return err
	}
	// tprof on but at 1 Hz: the timer stays out of the measurement
	if err := fac.SetRate(1, ""); err != nil {
		return err
	}
	if err := fac.On(); err != nil {
		return err
	}
	f, err := openDev()
	if err != nil {
		return err
	}
	defer f.Close()
	fd := f.Fd()

	// 1. tprof path: the module runs its sample function count times.
	b := arg("PITRACE_IOC_BENCH")
	tprof := minOf(func() uint64 {
		binary.LittleEndian.PutUint32(b[0:], 1)
		binary.LittleEndian.PutUint32(b[4:], 1000)
		if e := call(fd, "PITRACE_IOC_BENCH", b); e != 0 {
			return ^uint64(0)
		}
		return binary.LittleEndian.Uint64(b[8:])
	}, 5)
	if tprof == ^uint64(0) {
		return fmt.Errorf("bench ioctl failed")
	}
	tprofPer := float64(tprof) / 1000

	// 2. TraceHook path: hook ioctl minus an ioctl that does nothing.
	h := arg("PITRACE_IOC_HOOK")
	words := []uint32{1, 2, 3, 4}
	binary.LittleEndian.PutUint16(h[0:], 0x100)
	binary.LittleEndian.PutUint32(h[4:], 1)
	binary.LittleEndian.PutUint32(h[8:], uint32(len(words)))
	binary.LittleEndian.PutUint64(h[16:], uint64(uintptr(unsafe.Pointer(&words[0]))))
	hookReq := ioc["PITRACE_IOC_HOOK"]
	nullReq := uintptr(0x5401) // TCGETS: not the module's magic, ENOTTY at its first check
	hookT := minOf(func() uint64 { return ioctlLoop(fd, hookReq, uintptr(unsafe.Pointer(&h[0])), n) }, 3)
	nullT := minOf(func() uint64 { return ioctlLoop(fd, nullReq, 0, n) }, 3)
	runtime.KeepAlive(words)
	hookPer := (float64(hookT) - float64(nullT)) / float64(n)
	if err := fac.Off(); err != nil {
		return err
	}

	// 1b. tprof path with call stacks: the sample and its UNWIND record.
	stackPer, pcs, err := benchStacks(fac, fd, b)
	if err != nil {
		return err
	}
	if err := fac.Free(); err != nil {
		return err
	}

	// 3. perf: a tracepoint event with a sample per hit into a mapped ring buffer.
	perfPer, what, err := perfCost(n, perfPlain)
	if err != nil {
		return err
	}
	perfG, whatG, err := perfCost(n, perfChain)
	if err != nil {
		return err
	}
	perfU, whatU, err := perfCost(n, perfUserChain)
	if err != nil {
		return err
	}
	fmt.Printf("bench: per-record cost in TSC ticks (= guest instructions under -icount shift=0,sleep=off), best of several runs of %d records\n", n)
	fmt.Printf("bench: %-58s %8s %10s\n", "path", "instr", "x perf")
	fmt.Printf("bench: %-58s %8.0f %10.2f\n", "pitrace tprof sample (hrtimer path, in-kernel write)", tprofPer, tprofPer/perfPer)
	fmt.Printf("bench: %-58s %8.0f %10.2f\n", fmt.Sprintf("pitrace tprof sample + call stack (%.1f user PCs)", pcs), stackPer, stackPer/perfPer)
	fmt.Printf("bench: %-58s %8.0f\n", "  the stack alone, per PC", (stackPer-tprofPer)/pcs)
	fmt.Printf("bench: %-58s %8.0f %10.2f\n", "pitrace TraceHook (hook ioctl minus a null ioctl)", hookPer, hookPer/perfPer)
	fmt.Printf("bench: %-58s %8.0f %10.2f\n", "perf: "+what+" to its ring buffer", perfPer, 1.0)
	fmt.Printf("bench: %-58s %8.0f %10.2f\n", "perf: "+whatG, perfG, perfG/perfPer)
	fmt.Printf("bench: %-58s %8.0f %10.2f\n", "perf: "+whatU, perfU, perfU/perfPer)
	fmt.Printf("bench: call stacks (the same user stack): pitrace %.0f vs perf -g %.0f instructions per sample (%.2f x)\n", stackPer, perfU, stackPer/perfU)
	fmt.Printf("bench: target <= 0.50 x perf: tprof %s, TraceHook %s\n", verdict(tprofPer/perfPer), verdict(hookPer/perfPer))
	return nil
}

func verdict(r float64) string {
	if r <= 0.5 {
		return "met"
	}
	return "NOT met"
}

func tracepointID(name string) (uint64, error) {
	for _, root := range []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"} {
		b, err := os.ReadFile(root + "/events/" + name + "/id")
		if err == nil {
			return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		}
	}
	return 0, fmt.Errorf("tracepoint %s not found under /sys/kernel/tracing (mount tracefs)", name)
}

// perfCost modes: no call chain, perf record -g's, its user part only.
const (
	perfPlain = iota
	perfChain
	perfUserChain
)

// perfCost is the marginal cost of one perf sample of the
// syscalls:sys_enter_getppid tracepoint written to a ring buffer; with a
// call chain mode, the sample carries perf's call chain (frame pointers:
// what perf record -g takes), kernel and user or the user part only.
func perfCost(n int, mode int) (float64, string, error) {
	id, err := tracepointID("syscalls/sys_enter_getppid")
	if err != nil {
		return 0, "", err
	}
	attr := unix.PerfEventAttr{
		Type:        unix.PERF_TYPE_TRACEPOINT,
		Config:      id,
		Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample:      1,
		Sample_type: unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME,
		Bits:        unix.PerfBitDisabled,
	}
	what := "sys_enter_getppid sample (getppid minus bare)"
	pages := 1 + 1024 // 4 MB: room for every sample, none dropped
	if mode != perfPlain {
		attr.Sample_type |= unix.PERF_SAMPLE_CALLCHAIN
		attr.Sample_max_stack = 127
		what = "the same with its call chain, kernel + user (-g)"
		pages = 1 + 4096
	}
	if mode == perfUserChain {
		attr.Bits |= unix.PerfBitExcludeCallchainKernel
		what = "the same with its user call chain only"
	}
	pfd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return 0, "", fmt.Errorf("perf_event_open(sys_enter_getppid): %w", err)
	}
	defer unix.Close(pfd)
	ring, err := unix.Mmap(pfd, 0, pages*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return 0, "", fmt.Errorf("mmap perf ring: %w", err)
	}
	defer unix.Munmap(ring)
	base := minOf(func() uint64 { return getppidLoop(n) }, 3)
	var lost bool
	with := minOf(func() uint64 {
		meta := (*unix.PerfEventMmapPage)(unsafe.Pointer(&ring[0]))
		meta.Data_tail = meta.Data_head // empty the ring
		unix.IoctlSetInt(pfd, unix.PERF_EVENT_IOC_ENABLE, 0)
		t := getppidLoop(n)
		unix.IoctlSetInt(pfd, unix.PERF_EVENT_IOC_DISABLE, 0)
		if ringSamples(ring, meta) < n*9/10 {
			lost = true
		}
		return t
	}, 3)
	if lost {
		return 0, "", fmt.Errorf("perf ring held fewer samples than events: the comparison would be unfair")
	}
	return (float64(with) - float64(base)) / float64(n), what, nil
}

// benchStacks measures the tprof path with call stacks (swtrace enable
// callstack): the BENCH ioctl's samples are of this thread in its system
// call, so each stack is the user stack of this Go program (frame
// pointers), walked from the registers it entered the kernel with. It
// returns the cost per sample and the mean PCs per stack, from the trace.
func benchStacks(fac control.Facility, fd uintptr, b []byte) (float64, float64, error) {
	if err := fac.Free(); err != nil {
		return 0, 0, err
	}
	if err := fac.Init(control.Config{TraceBufSize: 16 << 20, MTEBufSize: 1 << 20}); err != nil {
		return 0, 0, err
	}
	if err := fac.Enable([]uint16{trace.MajorUnwind}); err != nil {
		return 0, 0, err
	}
	defer fac.Disable([]uint16{trace.MajorUnwind})
	if err := fac.On(); err != nil {
		return 0, 0, err
	}
	t := minOf(func() uint64 {
		binary.LittleEndian.PutUint32(b[0:], 1)
		binary.LittleEndian.PutUint32(b[4:], 1000)
		if e := call(fd, "PITRACE_IOC_BENCH", b); e != 0 {
			return ^uint64(0)
		}
		return binary.LittleEndian.Uint64(b[8:])
	}, 5)
	if err := fac.Off(); err != nil {
		return 0, 0, err
	}
	if t == ^uint64(0) {
		return 0, 0, fmt.Errorf("bench ioctl with call stacks failed")
	}
	file := "/tmp/bench-stacks.nrm2"
	if err := fac.Get(file); err != nil {
		return 0, 0, err
	}
	defer os.Remove(file)
	f, err := nrm2.Open(file)
	if err != nil {
		return 0, 0, err
	}
	var stacks, pcs int
	err = f.Records(func(r *trace.Record) error {
		if r.Major == trace.MajorUnwind && int(r.Field(1)) == unix.Gettid() {
			stacks++
			pcs += len(r.Str) / 8
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	if stacks < 1000 {
		return 0, 0, fmt.Errorf("bench with call stacks: %d stacks of this thread in the trace, want >= 1000", stacks)
	}
	return float64(t) / 1000, float64(pcs) / float64(stacks), nil
}

// ringSamples counts the PERF_RECORD_SAMPLE records between the ring's
// tail and head (a record never wraps here: the ring holds them all).
func ringSamples(ring []byte, meta *unix.PerfEventMmapPage) int {
	data := ring[meta.Data_offset : meta.Data_offset+meta.Data_size]
	n := 0
	for off := meta.Data_tail; off+8 <= meta.Data_head; {
		h := data[off%meta.Data_size:]
		if len(h) < 8 {
			break
		}
		size := uint64(binary.LittleEndian.Uint16(h[6:]))
		if size == 0 {
			break
		}
		if binary.LittleEndian.Uint32(h) == unix.PERF_RECORD_SAMPLE {
			n++
		}
		off += size
	}
	return n
}
