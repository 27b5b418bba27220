package nrm2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"perfinsp/format/trace"
)

// monotonicNow is the facility clock (CLOCK_MONOTONIC, ns) of both backends.
func monotonicNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

// FlagWriteError: a write to the file failed while tracing (a full disk):
// the chunks that could not be written are counted as lost records in the
// statistics, and the file ends on the last complete chunk.
const FlagWriteError = 1 << 3

// Writer writes a trace file into a file its caller opened (with the
// caller's own rights: on the daemon backend the client opens the file and
// passes the descriptor). It is the one writer of the project: both
// backends write normal-mode files with WriteTrace and stream wrap and cont
// modes with a Stream, both built on it.
//
// Room for the trailer (statistics and END chunk) is kept allocated past
// the last complete chunk, so a full disk never leaves a file without its
// end: a chunk that does not fit is dropped (its records are counted as
// lost) and the trailer is written where it would have started.
type Writer struct {
	f       *os.File
	hdr     Header
	off     int64 // end of the last complete chunk
	reserve int64
	err     error // the first write error; later chunks are refused
	closed  bool
}

// NewWriter truncates f and writes the header. The Writer owns f from here.
func NewWriter(f *os.File, h Header) (*Writer, error) {
	if h.Version == 0 {
		h.Version = Version
	}
	if h.ClockID == 0 {
		h.ClockID = ClockMonotonic
	}
	if h.ClockHz == 0 {
		h.ClockHz = 1_000_000_000
	}
	w := &Writer{f: f, hdr: h, off: HeaderSize}
	// The trailer: per CPU a statistics chunk and a small trace chunk
	// (TIME_HIGH + LOST, reason write failed), then END.
	w.reserve = int64(h.NCPUs+1)*(ChunkHeaderSize+StatsSize+lostChunkSize) + ChunkHeaderSize
	if err := f.Truncate(0); err != nil {
		return nil, fmt.Errorf("truncate %s: %w", f.Name(), err)
	}
	if _, err := f.WriteAt(h.Encode(), 0); err != nil {
		return nil, fmt.Errorf("write the header of %s: %w", f.Name(), err)
	}
	if err := w.reserveTrailer(); err != nil {
		return nil, fmt.Errorf("%s: no room for the end of the trace: %w", f.Name(), err)
	}
	return w, nil
}

// Create creates path (mode 0600) and writes the header; for tests and
// tools writing a file of their own. Tools writing a user's trace open it
// with control.CreateTraceFile and use NewWriter.
func Create(path string, h Header) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create trace file: %w", err)
	}
	w, err := NewWriter(f, h)
	if err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

// reserveTrailer keeps the trailer's room allocated past the end.
func (w *Writer) reserveTrailer() error {
	var err error
	for {
		// tmpfs gives up a fallocate with EINTR when a signal is pending
		// (Go's preemption signals, under load): that is no full disk.
		err = unix.Fallocate(int(w.f.Fd()), unix.FALLOC_FL_KEEP_SIZE, w.off, w.reserve)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return nil // a file system without fallocate: best effort
	}
	return err
}

// Path returns the file's name.
func (w *Writer) Path() string { return w.f.Name() }

// Err returns the first write error, if any.
func (w *Writer) Err() error { return w.err }

// Offset returns the size of the complete part of the file.
func (w *Writer) Offset() int64 { return w.off }

func chunkBytes(kind, cpu uint32, data []byte) []byte {
	pad := (8 - len(data)%8) % 8
	b := make([]byte, ChunkHeaderSize+len(data)+pad)
	binary.LittleEndian.PutUint32(b[0:], kind)
	binary.LittleEndian.PutUint32(b[4:], cpu)
	binary.LittleEndian.PutUint64(b[8:], uint64(len(data)))
	copy(b[ChunkHeaderSize:], data)
	return b
}

// WriteChunk appends one chunk. Trace and MTE chunks must hold whole records
// and start with a TIME_HIGH record. After a write error every chunk is
// refused with that error: the caller counts its records as lost.
func (w *Writer) WriteChunk(kind, cpu uint32, data []byte) error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return errors.New("trace file already closed")
	}
	// the header, the data, the padding: written as they are (a trace
	// chunk is a buffer's segment of megabytes, not copied first)
	var head [ChunkHeaderSize + 8]byte
	binary.LittleEndian.PutUint32(head[0:], kind)
	binary.LittleEndian.PutUint32(head[4:], cpu)
	binary.LittleEndian.PutUint64(head[8:], uint64(len(data)))
	pad := (8 - len(data)%8) % 8
	for i, b := range [][]byte{head[:ChunkHeaderSize], data, head[ChunkHeaderSize+8-pad:]} {
		if len(b) == 0 {
			continue
		}
		at := w.off + [3]int64{0, ChunkHeaderSize, ChunkHeaderSize + int64(len(data))}[i]
		if _, err := w.f.WriteAt(b, at); err != nil {
			w.err = fmt.Errorf("write %s: %w", w.f.Name(), err)
			return w.err
		}
	}
	start := w.off
	w.off += int64(ChunkHeaderSize + len(data) + pad)
	if err := w.reserveTrailer(); err != nil {
		// The chunk fitted but the trailer would not: drop the chunk, so
		// the trailer goes where the chunk's (allocated) bytes are.
		w.off = start
		w.err = fmt.Errorf("write %s: %w", w.f.Name(), err)
		return w.err
	}
	return nil
}

// Close writes the per-CPU statistics and the END chunk after the last
// complete chunk, sets the final header flags, cuts off anything past the
// end and closes the file. It succeeds after a write error (the file is
// then complete up to that point, and FlagWriteError is set) and returns
// that error so the caller can report it.
func (w *Writer) Close(flags uint32, stats []CPUStats) error {
	return w.close(flags, stats, nil)
}

// lostChunkSize bounds a trace chunk holding one TIME_HIGH and one LOST record.
const lostChunkSize = ChunkHeaderSize + 64

// close is Close with extra trace chunks (LOST records, by CPU) written
// into the reserved trailer room first.
func (w *Writer) close(flags uint32, stats []CPUStats, lostChunks map[int][]byte) error {
	if w.closed {
		return nil
	}
	w.closed = true
	defer w.f.Close()
	for cpu := range stats {
		if stats[cpu].Lost != 0 || stats[cpu].MTELost != 0 {
			flags |= FlagLost
		}
		if stats[cpu].Full != 0 {
			flags |= FlagBufferFull
		}
	}
	if w.err != nil {
		flags |= FlagWriteError | FlagLost
	}
	var tail []byte
	for cpu := 0; cpu < int(w.hdr.NCPUs); cpu++ {
		if c, ok := lostChunks[cpu]; ok {
			tail = append(tail, chunkBytes(ChunkTrace, uint32(cpu), c)...)
		}
	}
	for cpu := range stats {
		tail = append(tail, chunkBytes(ChunkStats, uint32(cpu), stats[cpu].encode())...)
	}
	tail = append(tail, chunkBytes(ChunkEnd, 0, nil)...)
	if _, err := w.f.WriteAt(tail, w.off); err != nil {
		return fmt.Errorf("write the end of %s: %w", w.f.Name(), err)
	}
	if err := w.f.Truncate(w.off + int64(len(tail))); err != nil {
		return fmt.Errorf("truncate %s: %w", w.f.Name(), err)
	}
	w.hdr.Flags = flags | FlagComplete
	if _, err := w.f.WriteAt(w.hdr.Encode(), 0); err != nil {
		return fmt.Errorf("write the header of %s: %w", w.f.Name(), err)
	}
	if err := w.f.Sync(); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("sync %s: %w", w.f.Name(), err)
	}
	return w.err
}

// Abort closes the file without finalizing it.
func (w *Writer) Abort() {
	if !w.closed {
		w.closed = true
		w.f.Close()
	}
}

// ReadKallsyms reads the kernel symbol table both backends store in traces.
func ReadKallsyms() []byte {
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return nil
	}
	defer f.Close()
	return readAllExact(f)
}

// kallsymsPiece is the size ReadKallsyms reads in.
const kallsymsPiece = 1 << 20

// readAllExact reads r to its end (or first error) into a slice of exactly
// what it read (nil if there is no memory to read it in). A file of /proc
// has no size to start from: os.ReadFile grows its slice step by step, a
// table of megabytes allocating some five times its size on the way; here
// the pieces are read, then copied once. The pieces are mapped outside the
// Go heap and unmapped once copied: the heap would keep their pages after
// they are garbage, and the agent's resident memory with them.
func readAllExact(r io.Reader) []byte {
	var pieces [][]byte // each a mapping of kallsymsPiece bytes, sliced to what was read
	defer func() {
		for _, p := range pieces {
			_ = unix.Munmap(p[:cap(p)])
		}
	}()
	total := 0
	for {
		p, err := unix.Mmap(-1, 0, kallsymsPiece, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil
		}
		n := 0
		for n < len(p) && err == nil {
			var k int
			k, err = r.Read(p[n:])
			n += k
		}
		pieces = append(pieces, p[:n])
		total += n
		if err != nil {
			break
		}
	}
	out := make([]byte, 0, total)
	for _, p := range pieces {
		out = append(out, p...)
	}
	return out
}

// Snapshot is a stopped trace held in a backend's buffers.
type Snapshot struct {
	Header   Header
	Kallsyms []byte
	// Segments calls fn with each complete segment of one CPU's buffer of
	// a kind (ChunkMTE or ChunkTrace), oldest first, stopping at fn's error.
	Segments func(cpu int, kind uint32, fn func(data []byte) error) error
	Flags    uint32
	Stats    []CPUStats
}

// WriteTrace writes a normal-mode trace file: header, kernel symbols, each
// CPU's MTE and trace segments, statistics, END. It owns f.
func WriteTrace(f *os.File, s *Snapshot) error {
	w, err := NewWriter(f, s.Header)
	if err != nil {
		f.Close()
		return err
	}
	if len(s.Kallsyms) > 0 {
		if err := w.WriteChunk(ChunkKallsyms, 0, s.Kallsyms); err != nil {
			w.Abort()
			return err
		}
	}
	for cpu := 0; cpu < int(s.Header.NCPUs); cpu++ {
		for _, kind := range []uint32{ChunkMTE, ChunkTrace} {
			err := s.Segments(cpu, kind, func(data []byte) error {
				return w.WriteChunk(kind, uint32(cpu), data)
			})
			if err != nil {
				w.Abort()
				return err
			}
		}
	}
	return w.Close(s.Flags, s.Stats)
}

// Stream writes a trace while it is recorded (wrap and cont modes): the
// backends' drainers hand it complete segments as they are taken out of
// the buffers. The kernel symbols are read in the background (a big
// kernel's table takes long, and segments cannot wait) and written as soon
// as they are in. After a write error (a full disk) the stream keeps
// taking segments and counts their records as lost, per CPU.
type Stream struct {
	w        *Writer
	ncpu     int
	kallsyms chan []byte
	ksDone   bool

	mu   sync.Mutex
	lost []CPUStats // records of chunks that could not be written
}

// StartStream writes the header into f (which it owns from here) and
// starts reading the kernel symbols.
func StartStream(f *os.File, h Header) (*Stream, error) {
	w, err := NewWriter(f, h)
	if err != nil {
		f.Close()
		return nil, err
	}
	s := &Stream{w: w, ncpu: int(h.NCPUs), kallsyms: make(chan []byte, 1), lost: make([]CPUStats, h.NCPUs)}
	go func() { s.kallsyms <- ReadKallsyms() }()
	return s, nil
}

// Chunk writes one segment of a CPU's buffer (kind ChunkMTE or ChunkTrace).
// It never fails: a segment that cannot be written is counted as lost and
// the error is reported by Err and Finish.
func (s *Stream) Chunk(kind uint32, cpu int, data []byte) {
	if !s.ksDone {
		select {
		case ks := <-s.kallsyms:
			s.writeKallsyms(ks)
		default:
		}
	}
	if len(data) == 0 {
		return
	}
	if err := s.w.WriteChunk(kind, uint32(cpu), data); err != nil {
		s.countLost(kind, cpu, data)
	}
}

func (s *Stream) writeKallsyms(ks []byte) {
	s.ksDone = true
	if len(ks) > 0 {
		_ = s.w.WriteChunk(ChunkKallsyms, 0, ks)
	}
}

func (s *Stream) countLost(kind uint32, cpu int, data []byte) {
	if cpu < 0 || cpu >= s.ncpu {
		return
	}
	n := CountRecords(data)
	s.mu.Lock()
	defer s.mu.Unlock()
	if kind == ChunkMTE {
		s.lost[cpu].MTELost += n
	} else {
		s.lost[cpu].Lost += n
	}
}

// Err returns the first write error.
func (s *Stream) Err() error { return s.w.Err() }

// Lost returns the records dropped so far because they could not be written.
func (s *Stream) Lost() (trace, mte uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lost {
		trace += l.Lost
		mte += l.MTELost
	}
	return
}

// Finish writes the kernel symbols if not yet written, adds the records
// lost to write errors to stats, and closes the file. It returns the write
// error, if any, after completing the file.
func (s *Stream) Finish(flags uint32, stats []CPUStats) error {
	if !s.ksDone {
		s.writeKallsyms(<-s.kallsyms)
	}
	s.mu.Lock()
	lostChunks := map[int][]byte{}
	now := monotonicNow()
	for cpu := range stats {
		if cpu < len(s.lost) {
			stats[cpu].Lost += s.lost[cpu].Lost
			stats[cpu].MTELost += s.lost[cpu].MTELost
			if n := s.lost[cpu].Lost + s.lost[cpu].MTELost; n > 0 {
				// Say it in the stream too, as every loss is said: a LOST
				// record of reason "write failed" ends the CPU's records.
				var tw trace.Writer
				if tw.Write(trace.MajorSys, trace.SysLost, trace.LayoutFixed, now, []uint64{n, trace.LostWriteFail}, "") == nil {
					lostChunks[cpu] = tw.Buf
				}
			}
		}
	}
	s.mu.Unlock()
	return s.w.close(flags, stats, lostChunks)
}

// Abort closes the file unfinished.
func (s *Stream) Abort() { s.w.Abort() }

// CountRecords counts the whole records at the start of a segment, TIME_HIGH
// records included (it stops at the first malformed one).
func CountRecords(data []byte) uint64 {
	n, _ := wholeRecords(data, 0, 0, false)
	return uint64(n)
}
