// Package hugeheap backs the Go heap a program is about to fill with
// transparent huge pages, where the kernel gives them only to memory that
// asks (THP "madvise", the common default).
//
// A report of a large trace fills tens to hundreds of megabytes of heap
// once and exits. Each 4 KB page of fresh memory costs a page fault, and
// in a virtual machine a fault costs far more than on bare metal (tens of
// times what the same memory costs in huge pages). Without huge pages
// post can spend a quarter of a many-process report, and a third of a
// call-stack report, in those faults.
//
// The Go runtime does not ask for huge pages for its heap, and it maps
// the heap as it grows (mmap MAP_FIXED), so advice given before would be
// lost. Reserve grows the heap at once by one large allocation, advises
// that memory for huge pages, and frees it (a collection of an almost
// empty heap): the runtime then hands out the same addresses first, now
// faulted in 2 MB at a time. Untouched, the reservation costs no memory;
// what is used is what would have been used in 4 KB pages.
package hugeheap

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

const hugePage = 2 << 20

// Files read to decide (tests point them elsewhere).
var (
	thpEnabled = "/sys/kernel/mm/transparent_hugepage/enabled"
	overcommit = "/proc/sys/vm/overcommit_memory"
	selfMaps   = "/proc/self/maps"
)

// Reserve prepares n bytes of heap (at most a quarter of the memory) in
// huge pages, if that is worth doing and safe here, and returns how many
// it prepared. Otherwise it returns why it did nothing: THP off or
// already on for all memory, strict overcommit (the reservation would
// count against the commit limit), PERFINSP_HUGEPAGES=0, or an error of
// madvise. Call it early, from the main program (it runs a collection).
func Reserve(n int) (reserved int, skipped string) {
	if os.Getenv("PERFINSP_HUGEPAGES") == "0" {
		return 0, "PERFINSP_HUGEPAGES=0"
	}
	if n < 2*hugePage {
		return 0, fmt.Sprintf("%d bytes: less than two huge pages", n)
	}
	mode, err := selected(thpEnabled)
	if err != nil {
		return 0, "transparent huge pages: " + err.Error()
	}
	if mode != "madvise" {
		return 0, "transparent huge pages: " + mode // always: nothing to ask; never: nothing to get
	}
	if oc, err := os.ReadFile(overcommit); err == nil && strings.TrimSpace(string(oc)) == "2" {
		return 0, "strict overcommit (vm.overcommit_memory = 2)"
	}
	// never more than a quarter of the memory: the kernel's heuristic
	// overcommit refuses a mapping larger than the memory, and the
	// runtime cannot survive a refused heap mapping
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err == nil {
		if q := uint64(si.Totalram) * uint64(si.Unit) / 4; uint64(n) > q {
			n = int(q)
		}
	}
	if n < 2*hugePage {
		return 0, fmt.Sprintf("%d bytes (a quarter of the memory): less than two huge pages", n)
	}
	// The collector off while the reservation is made: the allocation
	// would start a collection of its own (one more cycle before the
	// one below frees it).
	old := debug.SetGCPercent(-1)
	b := make([]byte, n)
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	beg := (p + hugePage - 1) &^ (hugePage - 1)
	end := (p + uintptr(n)) &^ (hugePage - 1)
	err = unix.Madvise(b[beg-p:end-p], unix.MADV_HUGEPAGE)
	b = nil
	runtime.GC() // the reservation is free again, for the allocations to come
	debug.SetGCPercent(old)
	if err != nil {
		return 0, "madvise: " + err.Error()
	}
	go populateBelow(beg)
	return n, ""
}

// populateBelow maps in the pages of the heap's mapping below beg (the
// reservation's start), at most lowMax bytes, with one madvise
// (MADV_POPULATE_WRITE, Linux 5.14; nothing on older kernels). That memory
// (the heap before the reservation: its first few megabytes, in 4 KB
// pages) is what the allocator hands out first once the collection freed
// it, and a fault a page there can cost more than all the rest of the
// report's faults. Called on a goroutine of its own:
// it runs beside the work that follows, on a CPU otherwise idle then.
func populateBelow(beg uintptr) {
	lo, ok := mappingStart(beg - 1)
	if !ok || lo >= beg {
		return
	}
	lo = max(lo, beg-lowMax)
	_, _, _ = unix.Syscall(unix.SYS_MADVISE, lo, beg-lo, unix.MADV_POPULATE_WRITE)
}

// lowMax bounds populateBelow: more than that is not the heap's start.
const lowMax = 16 << 20

// mappingStart is the start of the mapping of this process that holds
// addr (/proc/self/maps).
func mappingStart(addr uintptr) (uintptr, bool) {
	b, err := os.ReadFile(selfMaps)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		rng, _, _ := strings.Cut(line, " ")
		a, z, ok := strings.Cut(rng, "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(a, 16, 64)
		end, err2 := strconv.ParseUint(z, 16, 64)
		if err1 == nil && err2 == nil && uint64(addr) >= start && uint64(addr) < end {
			return uintptr(start), true
		}
	}
	return 0, false
}

// selected is the bracketed choice of a sysfs setting: "always [madvise]
// never" gives "madvise".
func selected(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := string(b)
	i, j := strings.IndexByte(s, '['), strings.IndexByte(s, ']')
	if i < 0 || j < i {
		return "", fmt.Errorf("%s: no [choice] in %q", path, strings.TrimSpace(s))
	}
	return s[i+1 : j], nil
}
