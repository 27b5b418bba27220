// Package perfring reads the mmap'd ring buffer of a perf event: the one
// reader of the project's perf rings (the daemon's per-CPU kernel events,
// daemon/kevents; the hot-spot walk's per-thread samples and probes,
// tools/hotspot). Other events of the same thread or CPU can write into a
// ring (Redirect, PERF_EVENT_IOC_SET_OUTPUT).
//
// Drain hands every record to a callback without allocating (a record
// that wraps around the end of the ring is copied into a scratch buffer
// reused from call to call) and counts the records, the records the
// kernel dropped (PERF_RECORD_LOST) and the corrupt headers it skipped.
package perfring

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Ring is the mapped ring buffer of one perf event. It is not safe for
// concurrent use: one goroutine drains it (or the caller locks).
type Ring struct {
	fd      int
	mem     []byte // nil once closed; not unmapped when not owned (tests)
	owned   bool
	meta    *unix.PerfEventMmapPage
	data    []byte
	mask    uint64
	scratch []byte

	// Records counts the records handed to Drain's callback (LOST ones too).
	Records uint64
	// Lost counts the records the kernel dropped, from its LOST records.
	Lost uint64
	// BeforeTail, when set, is called by Drain with the old and the new
	// tail before it stores the new one: the data between is read, and
	// still the reader's (a writer may not reuse it before the store).
	BeforeTail func(old, tail uint64)
	// Corrupt counts the times a record header with an impossible size
	// (under 8 bytes or over the ring's size) was met: the reader then
	// skips to the head, losing what was between (the kernel never writes
	// such a header; memory corruption or a misread would).
	Corrupt uint64
}

// Map maps pages (a power of two) of data, plus the control page, for the
// perf event fd.
func Map(fd, pages int) (*Ring, error) {
	if pages <= 0 || pages&(pages-1) != 0 {
		return nil, fmt.Errorf("perf ring of %d pages: want a power of two", pages)
	}
	ps := unix.Getpagesize()
	mem, err := unix.Mmap(fd, 0, (pages+1)*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map perf ring of %d pages: %w (raise /proc/sys/kernel/perf_event_mlock_kb?)", pages, err)
	}
	r := FromMemory(mem, ps)
	r.fd, r.owned = fd, true
	return r, nil
}

// FromMemory reads a ring laid out as the kernel maps it: a control page
// of pageSize bytes (struct perf_event_mmap_page), then a power of two of
// data bytes. Map uses it; tests build rings in ordinary memory with it.
func FromMemory(mem []byte, pageSize int) *Ring {
	return &Ring{
		fd:   -1,
		mem:  mem,
		meta: (*unix.PerfEventMmapPage)(unsafe.Pointer(&mem[0])),
		data: mem[pageSize:],
		mask: uint64(len(mem) - pageSize - 1),
	}
}

// Redirect makes event fd write its records into r (PERF_EVENT_IOC_SET_OUTPUT:
// the same thread or the same CPU, the same clock).
func (r *Ring) Redirect(fd int) error {
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_OUTPUT, r.fd); err != nil {
		return fmt.Errorf("PERF_EVENT_IOC_SET_OUTPUT: %w", err)
	}
	return nil
}

// Close unmaps the ring (the event fd is the caller's). A mapping holds its
// event alive: the event ends at the later of the unmap and the fd's close.
func (r *Ring) Close() error {
	if r == nil || r.mem == nil {
		return nil
	}
	var err error
	if r.owned {
		err = unix.Munmap(r.mem)
	}
	r.mem, r.meta = nil, nil
	return err
}

// Drain calls fn for each record written since the last call, in order:
// typ and misc from its header, body the bytes after the 8-byte header
// (valid only during the call). LOST records are counted in Lost and
// handed to fn too. A record the head does not cover yet is left for the
// next call; a corrupt header makes Drain skip to the head (Corrupt).
func (r *Ring) Drain(fn func(typ uint32, misc uint16, body []byte)) {
	if r == nil || r.meta == nil {
		return
	}
	head := atomic.LoadUint64(&r.meta.Data_head) // the kernel's writes before head are visible
	tail := atomic.LoadUint64(&r.meta.Data_tail)
	old := tail
	size := r.mask + 1
	for tail+8 <= head {
		off := tail & r.mask
		var hdr []byte
		if off+8 <= size {
			hdr = r.data[off : off+8]
		} else { // the kernel aligns records to 8 bytes: only a corrupt tail gets here
			r.scratch = r.scratch[:0]
			for i := uint64(0); i < 8; i++ {
				r.scratch = append(r.scratch, r.data[(tail+i)&r.mask])
			}
			hdr = r.scratch[:8]
		}
		typ := binary.LittleEndian.Uint32(hdr)
		misc := binary.LittleEndian.Uint16(hdr[4:])
		n := uint64(binary.LittleEndian.Uint16(hdr[6:]))
		if n < 8 || n > size {
			r.Corrupt++
			tail = head
			break
		}
		if tail+n > head {
			break // not all written yet: the next call reads it
		}
		var body []byte
		start := (tail + 8) & r.mask
		if blen := n - 8; start+blen <= size {
			body = r.data[start : start+blen]
		} else {
			if uint64(cap(r.scratch)) < blen {
				r.scratch = make([]byte, blen)
			}
			body = r.scratch[:blen]
			r.copyOut(body, start)
		}
		if typ == unix.PERF_RECORD_LOST && len(body) >= 16 {
			r.Lost += binary.LittleEndian.Uint64(body[8:]) // id, lost
		}
		r.Records++
		fn(typ, misc, body)
		tail += n
	}
	if r.BeforeTail != nil && tail != old {
		r.BeforeTail(old, tail)
	}
	atomic.StoreUint64(&r.meta.Data_tail, tail) // the kernel may reuse what is before tail
}

// copyOut fills dst from the ring's data at position pos, wrapping
// around its end.
func (r *Ring) copyOut(dst []byte, pos uint64) {
	k := copy(dst, r.data[pos&r.mask:])
	copy(dst[k:], r.data)
}

// Pending is the bytes written since the last Drain or Take.
func (r *Ring) Pending() uint64 {
	if r == nil || r.meta == nil {
		return 0
	}
	return atomic.LoadUint64(&r.meta.Data_head) - atomic.LoadUint64(&r.meta.Data_tail)
}

// Layout is the ring's control page and its data (a power of two of
// bytes): for a copier that reads or writes the ring outside Drain.
func (r *Ring) Layout() (*unix.PerfEventMmapPage, []byte) { return r.meta, r.data }

// Take copies into dst the records written since the last call, whole and
// in order, as many as fit, header and all (the ring's own bytes: what
// Drain would hand fn, to be decoded later); it returns the bytes copied
// and whether records remain. It counts no Records or Lost: whoever
// decodes the copy counts them. When all that was written fits, it is
// copied as it is; else the headers are read to stop at a record's end,
// and a corrupt one skips to the head, as in Drain.
func (r *Ring) Take(dst []byte) (n int, more bool) {
	if r == nil || r.meta == nil {
		return 0, false
	}
	head := atomic.LoadUint64(&r.meta.Data_head) // the kernel's writes before head are visible
	tail := atomic.LoadUint64(&r.meta.Data_tail)
	size := r.mask + 1
	end, skip := tail, false // end: past the whole records taken
	if head-tail <= uint64(len(dst)) && head-tail <= size {
		// All of it fits: the kernel moves the head past whole records
		// only (its nested writers publish with the outermost), so no
		// header need be read; a reader of the copy checks them.
		end = head
	}
	for end+8 <= head {
		off := end & r.mask
		rn := uint64(0)
		if off+8 <= size { // the kernel aligns records to 8 bytes: only a corrupt tail is not
			rn = uint64(binary.LittleEndian.Uint16(r.data[off+6:]))
		}
		if rn < 8 || rn > size {
			r.Corrupt++
			skip = true
			break
		}
		if end+rn > head {
			break // not all written yet: the next call takes it
		}
		if end+rn-tail > uint64(len(dst)) {
			more = true
			break
		}
		end += rn
	}
	if n = int(end - tail); n > 0 {
		r.copyOut(dst[:n], tail)
	}
	if skip {
		end = head // what is from the corrupt header on is dropped
	}
	if r.BeforeTail != nil && end != tail {
		r.BeforeTail(tail, end)
	}
	atomic.StoreUint64(&r.meta.Data_tail, end) // the kernel may reuse what is before end
	return n, more
}
