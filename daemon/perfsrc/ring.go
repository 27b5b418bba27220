package perfsrc

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

func le16(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }
func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// Offsets in struct perf_event_mmap_page (include/uapi/linux/perf_event.h).
const (
	offDataHead   = 1024
	offDataTail   = 1032
	offDataOffset = 1040
	offDataSize   = 1048
)

// ring is one perf ring buffer: a metadata page and a power-of-two data area.
type ring struct {
	fd      int
	mem     []byte
	data    []byte
	mask    uint64
	head    *uint64
	tail    *uint64
	scratch []byte // a record that wraps the end of the data area is copied here
}

// mapRing maps the ring of a perf event fd: one metadata page and pages
// data pages (a power of two).
func mapRing(fd, pages int) (*ring, error) {
	ps := unix.Getpagesize()
	mem, err := unix.Mmap(fd, 0, (1+pages)*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap perf ring (%d pages): %w", pages, err)
	}
	r := &ring{fd: fd, mem: mem}
	off := le64(mem[offDataOffset:])
	size := le64(mem[offDataSize:])
	if off == 0 || size == 0 { // kernels before 4.1 do not fill these in
		off, size = uint64(ps), uint64(pages*ps)
	}
	if off+size > uint64(len(mem)) || size&(size-1) != 0 {
		_ = unix.Munmap(mem)
		return nil, fmt.Errorf("perf ring: unexpected data area offset %d size %d", off, size)
	}
	r.data = mem[off : off+size]
	r.mask = size - 1
	r.head = (*uint64)(unsafe.Pointer(&mem[offDataHead]))
	r.tail = (*uint64)(unsafe.Pointer(&mem[offDataTail]))
	r.scratch = make([]byte, 1<<16) // a record's size is a u16
	return r, nil
}

func (r *ring) unmap() {
	if r != nil && r.mem != nil {
		_ = unix.Munmap(r.mem)
		r.mem, r.data = nil, nil
	}
}

// drain decodes every complete record between data_tail and data_head,
// calling fn with each one (valid only during the call), and then frees the
// space by storing the new data_tail. The atomic load of data_head orders
// the reads of the records after it (acquire), and the atomic store of
// data_tail orders them before the kernel may overwrite the space (release).
// It returns the number of records.
func (r *ring) drain(fn func(rec []byte)) int {
	if r == nil || r.data == nil {
		return 0
	}
	head := atomic.LoadUint64(r.head)
	tail := atomic.LoadUint64(r.tail)
	size := uint64(len(r.data))
	n := 0
	for tail < head {
		off := tail & r.mask
		// records are 8-byte aligned and the area is a multiple of 8: the
		// 8-byte header never wraps.
		hdr := r.data[off : off+8]
		rsz := uint64(le16(hdr[6:]))
		if rsz < 8 || tail+rsz > head {
			// corrupt or torn: skip everything there is
			tail = head
			break
		}
		var rec []byte
		if off+rsz <= size {
			rec = r.data[off : off+rsz]
		} else {
			first := size - off
			copy(r.scratch, r.data[off:])
			copy(r.scratch[first:], r.data[:rsz-first])
			rec = r.scratch[:rsz]
		}
		fn(rec)
		n++
		tail += rsz
	}
	atomic.StoreUint64(r.tail, tail)
	return n
}
