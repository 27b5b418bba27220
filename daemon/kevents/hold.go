package kevents

// Held records. A session whose records need not reach the sink as they
// come (Options.Hold: the agent's normal mode, whose trace is read only
// once tracing is off) copies what the kernel writes into its rings,
// whole records and undecoded, into memory of its own, and decodes them
// when they are asked for (Flush, Stop) or when what it holds would no
// longer fit in what the sink has room for. While sampling, the agent then
// costs about what perf record does, a copy at each wake-up; the decoding
// is done once, after, as perf report does perf record's.

import (
	"encoding/binary"
	"time"

	"golang.org/x/sys/unix"
)

// Roomer is a Sink that can say how many bytes of records it can still
// take for a CPU: held records are decoded before they would be more.
type Roomer interface {
	Room(cpu int) int64
}

// holdChunk is the size of the blocks held records are copied into. They
// are mapped populated (one fault a block, not one a page) and unmapped as
// soon as they are decoded. (Not huge pages: a fresh huge page is cleared
// whole, often from memory the machine has not touched since it started,
// and costs more than the small pages recently freed.)
const holdChunk = 1 << 20

// holdPoll is the longest the reader waits while it holds (Options.Poll
// when longer): a ring half full wakes it, and all it does is copy.
const holdPoll = time.Second

// holdMax bounds what a ring holds for a sink that does not say its room.
const holdMax = 64 << 20

// held is a ring's held records, oldest first.
type held struct {
	chunks [][]byte // each a mapping of holdChunk bytes, sliced to what is used
	bytes  int64
}

// grow maps a new chunk; false if the system has no memory for it.
func (h *held) grow() bool {
	mem, err := unix.Mmap(-1, 0, holdChunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return false
	}
	h.chunks = append(h.chunks, mem[:0])
	return true
}

// hold copies what r's ring holds into r.held, or, when that would be more
// than the sink has room for, decodes what is held and what the ring
// holds. Caller holds r.mu.
func (s *Session) hold(r *ring) {
	room := int64(holdMax)
	if s.roomer != nil {
		room = s.roomer.Room(r.cpu)
	}
	if r.held.bytes+int64(r.rb.Pending()) > room {
		s.drain(r)
		return
	}
	for {
		var c []byte
		if n := len(r.held.chunks); n > 0 {
			c = r.held.chunks[n-1]
		}
		if cap(c)-len(c) < 8 {
			if !r.held.grow() {
				s.drain(r) // no memory to hold in: decode now
				return
			}
			continue
		}
		n, more := r.rb.Take(c[len(c):cap(c)])
		r.held.chunks[len(r.held.chunks)-1] = c[:len(c)+n]
		r.held.bytes += int64(n)
		if !more {
			return
		}
		if n == 0 {
			// the next record does not fit in what is left of this
			// chunk: a new one
			if !r.held.grow() {
				s.drain(r)
				return
			}
		}
	}
}

// decodeHeld decodes r's held records, in order, unmapping each chunk
// once read. Caller holds r.mu.
func (s *Session) decodeHeld(r *ring) {
	for i, c := range r.held.chunks {
		for off := 0; off+8 <= len(c); {
			typ := binary.LittleEndian.Uint32(c[off:])
			misc := binary.LittleEndian.Uint16(c[off+4:])
			n := int(binary.LittleEndian.Uint16(c[off+6:]))
			if n < 8 || off+n > len(c) {
				r.rb.Corrupt++ // (the kernel publishes whole records only)
				break
			}
			body := c[off+8 : off+n]
			if typ == unix.PERF_RECORD_LOST && len(body) >= 16 {
				r.rb.Lost += binary.LittleEndian.Uint64(body[8:])
			}
			r.rb.Records++
			r.decode(typ, misc, body)
			off += n
		}
		_ = unix.Munmap(c[:cap(c)])
		r.held.chunks[i] = nil
	}
	r.held.chunks = r.held.chunks[:0]
	r.held.bytes = 0
}

// Unhold ends holding: what is held is delivered now, and every record
// from now on as it is read (another writer is about to write into the
// sink's buffers continuously, and they must stay in time order).
func (s *Session) Unhold() {
	s.holding.Store(false)
	s.Flush()
}

// freeHeld unmaps what r holds undecoded (a session closed without a
// last Flush).
func (r *ring) freeHeld() {
	for _, c := range r.held.chunks {
		_ = unix.Munmap(c[:cap(c)])
	}
	r.held = held{}
}
