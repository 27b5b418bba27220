// Package tracebuf holds the per-CPU segmented record buffer of the daemon
// backend and its three modes, with the same semantics as the kernel
// module's buffers:
//
//   - normal: records go into segments in order; when no segment is free the
//     buffer is full, the record is lost, and the buffer reports Full (the
//     facility then stops tracing).
//   - wrap: when no segment is free the oldest complete segment is reused;
//     the records it held are counted as lost (overwritten).
//   - cont: each complete segment is handed to the drainer (Take); when the
//     drainer has not given a segment back and none is free, records are
//     lost and counted, and a LOST record is written once space returns.
//
// Every segment starts with a TIME_HIGH record, so each one decodes on its
// own.
package tracebuf

import (
	"fmt"
	"sync"

	"perfinsp/format/trace"
)

// Mode is a buffer mode.
type Mode int

// Modes, with the values of the file header.
const (
	Normal Mode = 0
	Wrap   Mode = 1
	Cont   Mode = 2
)

// MinSegment is the smallest segment size.
const MinSegment = 1024

// Segments is the number of segments a buffer is divided into when its size allows.
const Segments = 16

// SegmentSize returns the segment size used for a buffer of size bytes.
func SegmentSize(size int) int {
	s := size / Segments
	if s < MinSegment {
		s = MinSegment
	}
	if s > size {
		s = size
	}
	return s &^ 3
}

// Segment is a run of whole records.
type Segment struct {
	Data    []byte
	Records uint64
}

// Buffer is one CPU's buffer of one record group (trace or MTE). It is safe
// for concurrent use.
type Buffer struct {
	mu      sync.Mutex
	mode    Mode
	segSize int
	nseg    int

	free    []*Segment // empty segments
	done    []*Segment // complete segments, oldest first (pending drain in cont mode)
	cur     *Segment
	w       trace.Writer
	records uint64
	lost    uint64
	bytes   uint64
	pending uint64 // lost records not yet reported by a LOST record
	full    bool
	// MTE marks an MTE buffer: its BUFFER_FULL record says so (normal mode).
	MTE bool
	// taken is the bytes of segments the drainer holds (Take, not yet
	// Release): still in use.
	taken int
	// Notify, if set, is called (without the lock held) when a segment
	// completes in cont mode.
	Notify func()
}

// New returns a buffer of size bytes in the given mode. A segment's
// memory is allocated when the buffer first writes into it: a buffer
// holds the memory of the segments it has used, at most size bytes.
func New(size int, mode Mode) (*Buffer, error) {
	if size < MinSegment {
		return nil, fmt.Errorf("buffer size %d bytes is below the minimum of %d", size, MinSegment)
	}
	seg := SegmentSize(size)
	n := size / seg
	b := &Buffer{mode: mode, segSize: seg, nseg: n}
	for i := 0; i < n; i++ {
		b.free = append(b.free, &Segment{})
	}
	b.nextSegment()
	return b, nil
}

// SegSize returns the segment size.
func (b *Buffer) SegSize() int { return b.segSize }

func (b *Buffer) nextSegment() bool {
	if len(b.free) == 0 {
		return false
	}
	b.cur = b.free[len(b.free)-1]
	b.free = b.free[:len(b.free)-1]
	if b.cur.Data == nil {
		b.cur.Data = make([]byte, 0, b.segSize)
	}
	b.cur.Data = b.cur.Data[:0]
	b.cur.Records = 0
	b.w.Buf = b.cur.Data
	b.w.ForceTimeHigh()
	return true
}

// complete retires the current segment; reports whether a cont-mode
// notification is due.
func (b *Buffer) complete() bool {
	b.cur.Data = b.w.Buf
	b.done = append(b.done, b.cur)
	b.cur = nil
	return b.mode == Cont
}

// Write writes one record. It returns false if the record was lost. In
// normal mode a lost record marks the buffer full.
func (b *Buffer) Write(major uint16, minor uint32, layout int, t uint64, fields []uint64, str string) (bool, error) {
	size := trace.EncodedSize(major, minor, layout, len(fields), str)
	if size+trace.TimeHighSize > b.segSize {
		b.mu.Lock()
		b.lost++
		b.pending++
		b.mu.Unlock()
		return false, fmt.Errorf("record of %d bytes does not fit a %d-byte segment", size, b.segSize)
	}
	notify := false
	b.mu.Lock()
	ok, err := b.write(major, minor, layout, t, fields, str, size, &notify)
	b.mu.Unlock()
	if notify && b.Notify != nil {
		b.Notify()
	}
	return ok, err
}

// Batch writes many records under one hold of the buffer's lock (a
// writer of many small records, as the JVMTI agent's method events,
// would otherwise take it once each, against the readers and the other
// writers): fn writes them through w, each as Write does.
func (b *Buffer) Batch(fn func(w *Locked)) {
	l := Locked{b: b}
	b.mu.Lock()
	fn(&l)
	b.mu.Unlock()
	if l.notify && b.Notify != nil {
		b.Notify()
	}
}

// Locked is a buffer whose lock its Batch holds.
type Locked struct {
	b      *Buffer
	notify bool
}

// Write writes one record, as Buffer.Write.
func (l *Locked) Write(major uint16, minor uint32, layout int, t uint64, fields []uint64, str string) (bool, error) {
	b := l.b
	size := trace.EncodedSize(major, minor, layout, len(fields), str)
	if size+trace.TimeHighSize > b.segSize {
		b.lost++
		b.pending++
		return false, fmt.Errorf("record of %d bytes does not fit a %d-byte segment", size, b.segSize)
	}
	return b.write(major, minor, layout, t, fields, str, size, &l.notify)
}

// WriteRecord writes rec, one whole encoded record, at time t (its time
// stamp's low half becomes t's), as Write would write it decoded: a
// writer whose records arrive in the trace's own layout copies them in.
// rec that is not exactly one record (trace.RecordSize) is refused and
// counted lost.
func (l *Locked) WriteRecord(rec []byte, t uint64) (bool, error) {
	b := l.b
	size, ok := trace.RecordSize(rec)
	if !ok || size+trace.TimeHighSize > b.segSize {
		b.lost++
		b.pending++
		if !ok {
			return false, fmt.Errorf("%d bytes are not one record", len(rec))
		}
		return false, fmt.Errorf("record of %d bytes does not fit a %d-byte segment", size, b.segSize)
	}
	if !b.reserve(size, t, &l.notify) {
		return false, nil
	}
	b.w.WriteRecord(rec, t)
	b.cur.Records++
	b.records++
	b.bytes += uint64(size)
	return true, nil
}

// WriteRecords writes recs, records of size bytes each as encoded, all of
// the time-high half of t (each keeps its own time stamp's low half), as
// WriteRecord would write each: as many as the current segment holds in
// one copy, then the next segment's. It returns how many were written;
// the others are lost and counted (recs that is not a whole number of
// records of a size the segments hold is refused, every record counted).
// The caller has checked each record (a writer of many records of one
// size: the JVMTI agent's method events).
func (l *Locked) WriteRecords(recs []byte, size int, t uint64) (int, error) {
	b := l.b
	if size < trace.HeaderSize || size%4 != 0 || size+trace.TimeHighSize > b.segSize || len(recs)%size != 0 {
		n := uint64(len(recs) / max(size, trace.HeaderSize))
		b.lost += n
		b.pending += n
		return 0, fmt.Errorf("%d bytes are not records of %d bytes a %d-byte segment holds", len(recs), size, b.segSize)
	}
	written := 0
	for len(recs) > 0 {
		if !b.reserve(size, t, &l.notify) {
			rest := uint64(len(recs)/size - 1) // reserve counted one
			b.lost += rest
			b.pending += rest
			break
		}
		room := b.segSize - len(b.w.Buf) - b.w.SizeWithTimeHigh(0, t)
		if b.mode == Normal && len(b.free) == 0 {
			room -= fullRecSize // as room keeps it
		}
		// 0 only in the last segment of a normal-mode buffer taken for this
		// record: its next reserve finds no room and marks the buffer full
		k := min(room/size, len(recs)/size)
		b.w.WriteRecords(recs[:k*size], t)
		b.cur.Records += uint64(k)
		b.records += uint64(k)
		b.bytes += uint64(k * size)
		recs = recs[k*size:]
		written += k
	}
	return written, nil
}

// Full is Buffer.Full.
func (l *Locked) Full() bool { return l.b.full }

// fullRecSize is the room normal mode keeps in its last segment for the
// BUFFER_FULL record.
var fullRecSize = trace.EncodedSize(trace.MajorSys, trace.SysBufFull, trace.LayoutFixed, 1, "")

func (b *Buffer) room(need int, t uint64, notify *bool) bool {
	if b.full {
		return false
	}
	last := b.mode == Normal && len(b.free) == 0
	if last {
		need += fullRecSize // the last segment keeps room for BUFFER_FULL
	}
	if b.cur != nil && len(b.w.Buf)+b.w.SizeWithTimeHigh(need, t) <= b.segSize {
		return true
	}
	if last && b.cur != nil {
		// The buffer is full: say so in it, where the reader sees when.
		mte := uint64(0)
		if b.MTE {
			mte = 1
		}
		if b.w.Write(trace.MajorSys, trace.SysBufFull, trace.LayoutFixed, t, []uint64{mte}, "") == nil {
			b.cur.Records++
			b.records++
		}
		b.complete()
		b.full = true
		return false
	}
	if b.cur != nil {
		if b.complete() {
			*notify = true
		}
	}
	if b.nextSegment() {
		return true
	}
	switch b.mode {
	case Wrap:
		if len(b.done) == 0 {
			return false
		}
		old := b.done[0]
		b.done = b.done[1:]
		b.lost += old.Records
		b.records -= old.Records
		b.free = append(b.free, old)
		return b.nextSegment()
	case Normal:
		b.full = true
	}
	return false
}

// lostSize is the size of a LOST record.
var lostSize = trace.EncodedSize(trace.MajorSys, trace.SysLost, trace.LayoutFixed, 2, "")

// reserve makes room for a record of size bytes at time t, after the LOST
// record of the records lost before it, if any: false (the record counted
// lost) when there is none.
func (b *Buffer) reserve(size int, t uint64, notify *bool) bool {
	if b.pending > 0 && !b.full {
		if !b.room(lostSize+size, t, notify) {
			b.lost++
			b.pending++
			return false
		}
		if err := b.w.Write(trace.MajorSys, trace.SysLost, trace.LayoutFixed, t, []uint64{b.pending, trace.LostBufferFull}, ""); err == nil {
			b.cur.Records++
			b.records++ // the LOST record is in the trace: the statistics count it
			b.bytes += uint64(lostSize)
			b.pending = 0
		}
	}
	if !b.room(size, t, notify) {
		b.lost++
		b.pending++
		return false
	}
	return true
}

func (b *Buffer) write(major uint16, minor uint32, layout int, t uint64, fields []uint64, str string, size int, notify *bool) (bool, error) {
	if !b.reserve(size, t, notify) {
		return false, nil
	}
	if err := b.w.Write(major, minor, layout, t, fields, str); err != nil {
		b.lost++ // a record that cannot be encoded is lost, and counted
		b.pending++
		return false, err
	}
	b.cur.Records++
	b.records++
	b.bytes += uint64(size)
	return true, nil
}

// AddLost counts n records lost before they reached the buffer (for
// example dropped by the kernel's perf ring); a LOST record follows in cont
// mode, and the count appears in the statistics in every mode.
func (b *Buffer) AddLost(n uint64) {
	b.mu.Lock()
	b.lost += n
	b.pending += n
	b.mu.Unlock()
}

// Stats are a buffer's counts.
type Stats struct {
	Records uint64 // records held or drained (written minus overwritten)
	Lost    uint64
	Bytes   uint64
	Full    bool
	Used    int // bytes currently held
	Size    int
}

// Stats returns the buffer's counts.
func (b *Buffer) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	used := b.taken
	for _, s := range b.done {
		used += len(s.Data)
	}
	if b.cur != nil {
		used += len(b.w.Buf)
	}
	return Stats{Records: b.records, Lost: b.lost, Bytes: b.bytes, Full: b.full, Used: used, Size: b.segSize * b.nseg}
}

// Full reports whether a normal-mode buffer has filled.
func (b *Buffer) Full() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.full
}

// Take removes and returns the complete segments (cont mode: those waiting
// to be drained). The caller must give each back with Release.
func (b *Buffer) Take() []*Segment {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.done
	b.done = nil
	for _, s := range out {
		b.taken += len(s.Data)
	}
	return out
}

// Release gives drained segments back to the buffer.
func (b *Buffer) Release(segs []*Segment) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range segs {
		b.taken -= len(s.Data)
		s.Data = s.Data[:0]
		s.Records = 0
		b.free = append(b.free, s)
	}
}

// Flush retires the current segment if it holds records, so that Take
// returns it (used at off and get).
func (b *Buffer) Flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cur != nil && len(b.w.Buf) > 0 {
		b.complete()
		b.nextSegment()
	}
}

// Each calls fn with each held segment, oldest first, the current partial
// one included, without copying them, and stops at fn's error. The buffer
// is locked meanwhile: fn must not write into it.
func (b *Buffer) Each(fn func(data []byte) error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.done {
		if err := fn(s.Data); err != nil {
			return err
		}
	}
	if b.cur != nil && len(b.w.Buf) > 0 {
		return fn(b.w.Buf)
	}
	return nil
}

// Snapshot returns copies of the held segments, oldest first, including the
// current partial one, without changing the buffer.
func (b *Buffer) Snapshot() [][]byte {
	var out [][]byte
	_ = b.Each(func(data []byte) error {
		out = append(out, append([]byte(nil), data...))
		return nil
	})
	return out
}
