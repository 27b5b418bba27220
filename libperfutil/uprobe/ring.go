package uprobe

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Ring is the mmap'd ring buffer of one per-thread perf event; other
// events of the same thread can write into it (Redirect).
type Ring struct {
	fd   int
	mem  []byte
	meta *unix.PerfEventMmapPage
	data []byte
	mask uint64
	buf  []byte
	Lost uint64 // records the kernel dropped
}

// NewRing maps pages (a power of two) of data for the event fd.
func NewRing(fd, pages int) (*Ring, error) {
	if pages <= 0 || pages&(pages-1) != 0 {
		return nil, fmt.Errorf("ring of %d pages: want a power of two", pages)
	}
	ps := unix.Getpagesize()
	mem, err := unix.Mmap(fd, 0, (pages+1)*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map perf ring: %w (raise /proc/sys/kernel/perf_event_mlock_kb?)", err)
	}
	r := &Ring{fd: fd, mem: mem, meta: (*unix.PerfEventMmapPage)(unsafe.Pointer(&mem[0])), data: mem[ps:], mask: uint64(pages*ps - 1)}
	return r, nil
}

// Redirect makes event fd write its samples into r (same thread, any CPU).
func (r *Ring) Redirect(fd int) error {
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_OUTPUT, r.fd); err != nil {
		return fmt.Errorf("PERF_EVENT_IOC_SET_OUTPUT: %w", err)
	}
	return nil
}

// Close unmaps the ring (the event fd is the caller's). A mapping holds
// its event (and so the probe) alive: unmap before closing the fd.
func (r *Ring) Close() error {
	if r == nil || r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem = nil
	return err
}

// Drain calls fn for each record written since the last call; body is the
// record after its 8-byte header and is valid only during the call.
func (r *Ring) Drain(fn func(typ uint32, misc uint16, body []byte)) {
	head := atomic.LoadUint64(&r.meta.Data_head)
	tail := r.meta.Data_tail
	size := r.mask + 1
	for tail+8 <= head {
		var hdr [8]byte
		for i := range hdr {
			hdr[i] = r.data[(tail+uint64(i))&r.mask]
		}
		typ := binary.LittleEndian.Uint32(hdr[0:])
		misc := binary.LittleEndian.Uint16(hdr[4:])
		n := uint64(binary.LittleEndian.Uint16(hdr[6:]))
		if n < 8 || n > size || tail+n > head {
			break // torn or corrupt: resynchronise at head
		}
		start := (tail + 8) & r.mask
		body := n - 8
		if start+body <= size {
			fn2(fn, typ, misc, r.data[start:start+body], r)
		} else {
			r.buf = append(r.buf[:0], r.data[start:]...)
			r.buf = append(r.buf, r.data[:body-(size-start)]...)
			fn2(fn, typ, misc, r.buf, r)
		}
		tail += n
	}
	if tail+8 > head || tail > head {
		tail = head
	}
	atomic.StoreUint64(&r.meta.Data_tail, tail)
}

func fn2(fn func(uint32, uint16, []byte), typ uint32, misc uint16, b []byte, r *Ring) {
	if typ == unix.PERF_RECORD_LOST && len(b) >= 16 {
		r.Lost += binary.LittleEndian.Uint64(b[8:])
		return
	}
	fn(typ, misc, b)
}

// Sample is a decoded probe sample (EntrySample or ReturnSample layout).
type Sample struct {
	ID       uint64
	PID, TID uint32
	Time     uint64
	TopWord  uint64 // the user stack's top word (entry samples)
	HasTop   bool
	// Read is the group leader's count at the hit (probes opened with
	// OpenOpts.Group: Layout.Read).
	Read uint64
}

// Layout says which optional parts a probe sample has.
type Layout struct {
	Stack bool // the entry layout: the user stack's top word
	Read  bool // PERF_SAMPLE_READ of a group (OpenOpts.Group)
}

// DecodeSample decodes a PERF_RECORD_SAMPLE body of a probe event; entry
// says whether the layout has the stack word. The identifier comes first
// in both layouts, so a caller can read it (ID) before choosing.
func DecodeSample(b []byte, entry bool) (Sample, bool) {
	return Decode(b, Layout{Stack: entry})
}

// Decode decodes a PERF_RECORD_SAMPLE body of a probe event of layout l.
func Decode(b []byte, l Layout) (Sample, bool) {
	var s Sample
	if len(b) < 24 {
		return s, false
	}
	s.ID = binary.LittleEndian.Uint64(b)
	s.PID = binary.LittleEndian.Uint32(b[8:])
	s.TID = binary.LittleEndian.Uint32(b[12:])
	s.Time = binary.LittleEndian.Uint64(b[16:])
	b = b[24:]
	if l.Read {
		// PERF_FORMAT_GROUP: nr, then nr values, the leader's first.
		if len(b) < 16 {
			return s, false
		}
		nr := binary.LittleEndian.Uint64(b)
		if nr == 0 || nr > uint64(len(b)/8-1) {
			return s, false
		}
		s.Read = binary.LittleEndian.Uint64(b[8:])
		b = b[8+8*nr:]
	}
	if !l.Stack {
		return s, true
	}
	if len(b) < 8 {
		return s, false
	}
	n := binary.LittleEndian.Uint64(b)
	if n == 0 || n > uint64(len(b)-8) {
		return s, true // no stack dumped (kernel thread, fault)
	}
	if len(b) < 16+int(n) {
		return s, false
	}
	dyn := binary.LittleEndian.Uint64(b[8+n:])
	if dyn >= 8 && n >= 8 {
		s.TopWord = binary.LittleEndian.Uint64(b[8:])
		s.HasTop = true
	}
	return s, true
}

// ID reads a sample record's identifier (PERF_SAMPLE_IDENTIFIER first).
func SampleID(b []byte) (uint64, bool) {
	if len(b) < 8 {
		return 0, false
	}
	return binary.LittleEndian.Uint64(b), true
}
