//go:build cgo

package kevents

// The copier: a thread outside the Go scheduler that moves the kernel's
// perf rings into larger rings of the agent's own (spill rings) as soon as
// the kernel wakes it, for the real-time reader to decode from.
//
// The reader is a goroutine locked to a real-time thread, and a goroutine
// is preempted now and then (a collection scanning its stack, the
// runtime's monitor after 10 ms on one P). A preempted goroutine locked to
// its thread runs again only when another thread of the runtime, one at
// the ordinary policy, hands it a P back: on a machine whose CPUs are
// taken, that thread waits its turn, and the reader with it, for tens to
// hundreds of milliseconds, while a switch storm fills a 4 MB ring in
// fifty. The copier's loop runs in one C call that does not return until
// the session stops: its thread never needs a P, so nothing of the
// runtime's stops it. It copies whole records (the spill ring then holds
// records only, and the kernel's ring begins at one), and the reader's
// stalls fall into the spill ring's 64 MB a CPU instead of into the
// kernel's drops. The spill rings are reserved address space: the reader
// gives back the pages it has read (MADV_DONTNEED), so the memory used is
// about what waits to be read.

/*
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <stdlib.h>
#include <unistd.h>

struct pi_ring {
	volatile uint64_t *khead, *ktail; // the kernel's ring: data_head, data_tail
	unsigned char *kdata;
	uint64_t ksize;
	volatile uint64_t *shead, *stail; // the spill ring
	unsigned char *sdata;
	uint64_t ssize;
};

// pi_move copies n bytes from ring offset a (size as, a power of two) to
// ring offset b (size bs), each wrapping at its end.
static void pi_move(unsigned char *dst, uint64_t bs, uint64_t b, const unsigned char *src, uint64_t as, uint64_t a, uint64_t n)
{
	while (n > 0) {
		uint64_t ao = a & (as - 1), bo = b & (bs - 1);
		uint64_t k = n;
		if (k > as - ao)
			k = as - ao;
		if (k > bs - bo)
			k = bs - bo;
		memcpy(dst + bo, src + ao, k);
		a += k;
		b += k;
		n -= k;
	}
}

// pi_copy moves the whole records the kernel has written that fit into
// the spill ring; it returns 1 when records were left for want of room,
// and adds 1 to *moved when it moved any.
static int pi_copy(struct pi_ring *r, int *moved)
{
	// Acquire: the kernel writes a record, then (smp_wmb) data_head.
	uint64_t kh = __atomic_load_n(r->khead, __ATOMIC_ACQUIRE);
	uint64_t kt = *r->ktail; // written by this thread alone
	uint64_t sh = *r->shead; // likewise
	// Acquire: the reader is done with what is before stail (pairs
	// with its store of data_tail after it read).
	uint64_t st = __atomic_load_n(r->stail, __ATOMIC_ACQUIRE);
	uint64_t room = r->ssize - (sh - st), end = kt;
	int full = 0;

	while (end + 8 <= kh) {
		uint16_t size;
		pi_move((unsigned char *)&size, 2, 0, r->kdata, r->ksize, end + 6, 2);
		if (size < 8 || size > r->ksize) {
			// Corrupt (the kernel writes no such header): hand on
			// what fits, the reader counts it and skips to the head.
			end = kh - kt > room ? kt + room : kh;
			break;
		}
		if (end + size > kh)
			break;
		if (end + size - kt > room) {
			full = 1;
			break;
		}
		end += size;
	}
	if (end == kt)
		return full;
	pi_move(r->sdata, r->ssize, sh, r->kdata, r->ksize, kt, end - kt);
	// Release: the records, then the head that covers them (pairs with
	// the reader's load of data_head).
	__atomic_store_n(r->shead, sh + (end - kt), __ATOMIC_RELEASE);
	// Full barrier: the copy's reads before the kernel may reuse the
	// space (pairs with the kernel's smp_mb after it reads data_tail).
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	*r->ktail = end;
	*moved = 1;
	return full;
}

// pi_loop copies until stopfd is readable (after one last pass). epfd
// holds the kernel rings' event fds (the kernel wakes them at a ring's
// watermark) and stopfd (its data.fd -1); notifyfd, an eventfd, wakes the
// reader when records were moved, and at every timeout (the reader's
// periodic drain). Returns 0, or -errno of a failed wait.
static int pi_loop(struct pi_ring *rings, int n, int epfd, int notifyfd, int timeout_ms)
{
	struct epoll_event ev[16];
	int timeout = timeout_ms;

	for (;;) {
		int k = epoll_wait(epfd, ev, 16, timeout);
		int stop = 0, full = 0, moved = 0;

		if (k < 0 && errno != EINTR)
			return -errno;
		for (int i = 0; i < k; i++)
			if (ev[i].data.fd == -1)
				stop = 1;
		for (int i = 0; i < n; i++)
			full |= pi_copy(&rings[i], &moved);
		if (moved || k == 0) {
			uint64_t one = 1;
			if (write(notifyfd, &one, sizeof(one)) < 0) {
				// EAGAIN: the counter is full, the reader has
				// wake-ups enough
			}
		}
		if (stop)
			return 0;
		// A spill ring full: look again soon, the reader frees room.
		timeout = full ? 1 : timeout_ms;
	}
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"perfinsp/internal/perfring"
)

// spillBytes is each CPU's spill ring: address space reserved, pages used
// only while records wait in them.
const spillBytes = 64 << 20

type copier struct {
	c        *C.struct_pi_ring // n of them, C memory
	n        int
	spills   [][]byte // each: a control page, then spillBytes
	epfd     int      // the kernel rings' fds and stopfd
	stopfd   int
	notifyfd int
	done     chan int
	started  bool // start was called
	stopped  atomic.Bool
}

// newCopier makes a spill ring for each of the session's rings and
// points the ring's reader at it (its kernel ring kept as r.krb); epfd
// is the set of the kernel rings' fds, which becomes the copier's (it
// closes it). The copier runs once start is called.
func newCopier(rings []*ring, epfd int) (*copier, error) {
	cp := &copier{n: len(rings), epfd: -1, stopfd: -1, notifyfd: -1, done: make(chan int, 1)}
	ok := false
	defer func() {
		if !ok {
			cp.close()
		}
	}()
	var err error
	if cp.stopfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC); err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	if cp.notifyfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, cp.stopfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: -1}); err != nil {
		return nil, fmt.Errorf("epoll add: %w", err)
	}
	cp.c = (*C.struct_pi_ring)(C.calloc(C.size_t(len(rings)), C.sizeof_struct_pi_ring))
	if cp.c == nil {
		return nil, fmt.Errorf("copier: out of memory")
	}
	cs := unsafe.Slice(cp.c, len(rings))
	ps := unix.Getpagesize()
	var spillRings []*perfring.Ring
	for i, r := range rings {
		mem, err := unix.Mmap(-1, 0, ps+spillBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
		if err != nil {
			return nil, fmt.Errorf("spill ring of %d MB: %w", spillBytes>>20, err)
		}
		cp.spills = append(cp.spills, mem)
		spill := perfring.FromMemory(mem, ps)
		cs[i] = piRing(r.rb, spill)
		_, sdata := spill.Layout()
		spill.BeforeTail = pageReleaser(sdata)
		spillRings = append(spillRings, spill)
	}
	for i, r := range rings {
		r.krb, r.rb = r.rb, spillRings[i]
	}
	cp.epfd = epfd
	ok = true
	return cp, nil
}

// piRing is the copier's view of kernel ring k and spill ring s (both in
// memory that is not Go's: mapped).
func piRing(k, s *perfring.Ring) C.struct_pi_ring {
	kmeta, kdata := k.Layout()
	smeta, sdata := s.Layout()
	return C.struct_pi_ring{
		khead: (*C.uint64_t)(unsafe.Pointer(&kmeta.Data_head)), ktail: (*C.uint64_t)(unsafe.Pointer(&kmeta.Data_tail)),
		kdata: (*C.uchar)(unsafe.Pointer(&kdata[0])), ksize: C.uint64_t(len(kdata)),
		shead: (*C.uint64_t)(unsafe.Pointer(&smeta.Data_head)), stail: (*C.uint64_t)(unsafe.Pointer(&smeta.Data_tail)),
		sdata: (*C.uchar)(unsafe.Pointer(&sdata[0])), ssize: C.uint64_t(len(sdata)),
	}
}

// copyPass runs one pass of the copier from kernel ring k into spill
// ring s (for the tests): whether records were left for want of room,
// and whether any were moved.
func copyPass(k, s *perfring.Ring) (full, moved bool) {
	c := (*C.struct_pi_ring)(C.calloc(1, C.sizeof_struct_pi_ring))
	defer C.free(unsafe.Pointer(c))
	*c = piRing(k, s)
	var m C.int
	f := C.pi_copy(c, &m)
	return f != 0, m != 0
}

// pageReleaser gives back to the kernel the pages of data (a spill
// ring's) that lie wholly in what one drain read, from old to tail. It
// runs before the reader stores the new tail, while the copier may not
// write there yet; a page the drain read only part of is kept (the
// copier may be writing its other part on its next lap). A storm's
// drains are long and give back nearly all they read; a trickle's keep
// a page or two each.
func pageReleaser(data []byte) func(old, tail uint64) {
	mask := uint64(len(data) - 1)
	ps := uint64(unix.Getpagesize())
	return func(old, tail uint64) {
		from, end := (old+ps-1)&^(ps-1), tail&^(ps-1)
		for from < end {
			off := from & mask
			n := min(end-from, uint64(len(data))-off)
			_ = unix.Madvise(data[off:off+n], unix.MADV_DONTNEED)
			from += n
		}
	}
}

// start runs the copier on a thread of its own at real-time priority
// (without it, at the ordinary policy: the reader says why).
func (cp *copier) start(timeoutMs int) {
	cp.started = true
	go func() {
		runtime.LockOSThread() // for good: the thread ends with the goroutine
		_ = setRealtime(true)
		cp.done <- int(C.pi_loop(cp.c, C.int(cp.n), C.int(cp.epfd), C.int(cp.notifyfd), C.int(timeoutMs)))
	}()
}

// wakeFd is the fd the reader waits on.
func (cp *copier) wakeFd() int { return cp.notifyfd }

// ack takes the reader's wake-ups off the eventfd.
func (cp *copier) ack() {
	var b [8]byte
	_, _ = unix.Read(cp.notifyfd, b[:])
}

// stop ends the copier after its last pass; from then on the reader also
// reads the kernel's rings (which begin at a record the copier left).
func (cp *copier) stop() error {
	if !cp.started || cp.stopped.Load() {
		return nil
	}
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	if _, err := unix.Write(cp.stopfd, one); err != nil {
		return fmt.Errorf("stop the ring copier: %w", err)
	}
	rc := <-cp.done
	cp.stopped.Store(true)
	if rc < 0 {
		return fmt.Errorf("ring copier: %w", unix.Errno(-rc))
	}
	return nil
}

// direct tells whether the reader reads the kernel's rings too.
func (cp *copier) direct() bool { return cp.stopped.Load() }

func (cp *copier) close() {
	for _, m := range cp.spills {
		_ = unix.Munmap(m)
	}
	cp.spills = nil
	if cp.c != nil {
		C.free(unsafe.Pointer(cp.c))
		cp.c = nil
	}
	for _, fd := range []int{cp.stopfd, cp.notifyfd, cp.epfd} {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
	cp.stopfd, cp.notifyfd, cp.epfd = -1, -1, -1
}
