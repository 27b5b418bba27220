package nrm2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"perfinsp/format/trace"
	"perfinsp/internal/untrusted"
)

// Chunk is one chunk of a parsed file.
type Chunk struct {
	Kind   uint32
	CPU    uint32
	Offset int64 // file offset of the chunk's data
	Data   []byte
}

// File is a parsed trace file.
type File struct {
	Path     string
	Header   Header
	Chunks   []Chunk
	Stats    []CPUStats // indexed by CPU; zero when the file has no statistics
	Kallsyms []byte
	Complete bool // the END chunk was found
	// HasStats is true when the file holds CPU statistics (a file cut
	// short has none: its lost-record counts are unknown).
	HasStats bool
	mapping  []byte
	src      *os.File // the mapped file, for ReadData
	salvage  bool
	// damage is what Parse skipped; recDamage what the last Records skipped.
	damage    []Damage
	recDamage []Damage
}

// Options say how a file is read.
type Options struct {
	// Salvage reads a damaged file instead of refusing it: every complete
	// chunk of a file cut short is read, and so are the whole records of
	// the chunk that was cut; an unreadable chunk header is skipped to the
	// next chunk; a record that does not decode loses the rest of its
	// segment only (the stream starts again at the next TIME_HIGH record).
	// What was skipped is listed by Damage and Warnings.
	Salvage bool
}

// Damage is one place where a file read with Options.Salvage was damaged.
type Damage struct {
	Offset int64  // file offset where the damage starts
	Lost   int64  // bytes present in the file that could not be read
	CPU    int    // the CPU whose records were lost; -1 when not known
	Kind   uint32 // ChunkTrace or ChunkMTE for records; 0 when not known
	Kept   int    // a cut chunk: its whole records that were kept
	Cut    bool   // the file ends here: it was truncated or torn
	Msg    string
}

func (d Damage) String() string { return fmt.Sprintf("byte offset %d: %s", d.Offset, d.Msg) }

// maxRead bounds the copy made of a file that cannot be mapped.
const maxRead = 4 << 30

// Open reads a trace file and refuses a damaged one (see OpenWith).
func Open(path string) (*File, error) { return OpenWith(path, Options{}) }

// OpenWith maps (or, where mapping fails, reads) and parses a trace file.
// Only a regular file is read, and its header is checked before anything
// else: a FIFO, a device or a directory is refused at once, so no input
// makes the reader block or read without bound. The chunks' data are
// slices of the mapping: Close releases it.
func OpenWith(path string, opt Options) (*File, error) {
	data, src, err := load(path)
	mapped := src != nil
	if err != nil {
		var fe *FormatError
		if errors.As(err, &fe) {
			fe.Path = path
		}
		return nil, err
	}
	f, err := ParseWith(data, opt)
	if err != nil && mapped {
		_ = syscall.Munmap(data)
		src.Close()
	}
	if err != nil {
		var fe *FormatError
		if errors.As(err, &fe) {
			fe.Path = path
		}
		return nil, err
	}
	f.Path = path
	if mapped {
		f.mapping, f.src = data, src
	}
	return f, nil
}

// load maps the file at path and returns the mapping and the file (kept
// open for ReadData), or reads it into memory where it cannot be mapped
// (no file then).
func load(path string) ([]byte, *os.File, error) {
	// Opening a FIFO must not wait for a writer.
	fh, st, err := untrusted.Open(path)
	var nr *untrusted.NotRegularError
	if errors.As(err, &nr) {
		return nil, nil, fmt.Errorf("read trace file %s: it is %s, not a trace file: give the path of a swtrace.nrm2 file", path, nr.Kind())
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read trace file: %w", err)
	}
	size := st.Size()
	if size == 0 {
		fh.Close()
		return nil, nil, &FormatError{Msg: "the file is empty: no trace was written to it"}
	}
	head := make([]byte, HeaderSize)
	n, err := io.ReadFull(fh, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		fh.Close()
		return nil, nil, fmt.Errorf("read trace file %s: %w", path, err)
	}
	if _, err := DecodeHeader(head[:n]); err != nil {
		fh.Close()
		return nil, nil, err
	}
	// The pages are mapped as they are touched (Populate maps them all):
	// a reader that takes the records with ReadData touches only the
	// chunk headers and what it decodes from the mapping.
	if b, err := syscall.Mmap(int(fh.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_PRIVATE); err == nil {
		return b, fh, nil
	}
	defer fh.Close()
	if size > maxRead {
		return nil, nil, fmt.Errorf("read trace file %s: it cannot be mapped and is larger than %d bytes", path, int64(maxRead))
	}
	b := make([]byte, size)
	n, err = io.ReadFull(io.NewSectionReader(fh, 0, size), b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, nil, fmt.Errorf("read trace file %s: %w", path, err)
	}
	return b[:n], nil, nil
}

// Populate maps every page of the file's mapping at once, for a reader
// of every byte: one call instead of a fault per 64 KB (a no-op for a
// file read into memory, or where the kernel cannot, before 5.14).
func (f *File) Populate() {
	if f.mapping != nil {
		_ = unix.Madvise(f.mapping, unix.MADV_POPULATE_READ)
	}
}

// ReadData reads len(p) bytes of c's data from offset off into p, the
// bytes c.Data holds. From a mapped file they are read from the file (a
// copy made by the kernel): memory of the reader's own, used again, costs
// less than touching each page of the mapping once, where page faults or
// page-table misses are dear (a virtual machine with shadow paging pays
// for the first touch of every 4 KB page, even when present); else
// they are copied from c.Data.
func (f *File) ReadData(c Chunk, p []byte, off int) error {
	if off < 0 || off > len(c.Data) || len(p) > len(c.Data)-off {
		return fmt.Errorf("read trace data: bytes %d-%d of a chunk of %d", off, off+len(p), len(c.Data))
	}
	if f.src == nil {
		copy(p, c.Data[off:])
		return nil
	}
	if _, err := f.src.ReadAt(p, c.Offset+int64(off)); err != nil {
		return fmt.Errorf("read trace file %s at byte %d: %w", f.Path, c.Offset+int64(off), err)
	}
	return nil
}

// Close releases the file's mapping; its records must not be used after.
func (f *File) Close() error {
	if f.mapping == nil {
		return nil
	}
	m := f.mapping
	f.mapping = nil
	err := syscall.Munmap(m)
	if f.src != nil {
		f.src.Close()
		f.src = nil
	}
	return err
}

// Parse parses a whole trace file held in memory and refuses a damaged
// one. It never panics on bad input; errors name the byte offset.
func Parse(data []byte) (*File, error) { return ParseWith(data, Options{}) }

// ParseWith parses a whole trace file held in memory. Without
// Options.Salvage the first problem is an error naming its byte offset;
// with it, the problem is recorded (Damage) and parsing goes on. It never
// panics on bad input.
func ParseWith(data []byte, opt Options) (*File, error) {
	h, err := DecodeHeader(data)
	if err != nil {
		return nil, err
	}
	f := &File{Header: h, Stats: make([]CPUStats, h.NCPUs), salvage: opt.Salvage}
	size := int64(len(data))
	off := int64(HeaderSize)
	for off < size {
		next, ferr := f.chunk(data, off)
		if ferr == nil {
			if opt.Salvage && next < size {
				if _, _, _, e := f.checkChunk(data, next); e != nil {
					next = f.checkLength(data, off, next)
				}
			}
			off = next
			continue
		}
		if !opt.Salvage {
			return nil, ferr
		}
		off = f.salvageChunk(data, off, ferr)
	}
	return f, nil
}

// checkChunk checks the chunk header at off and returns its kind, CPU and
// data.
func (f *File) checkChunk(data []byte, off int64) (kind, cpu uint32, body []byte, ferr *FormatError) {
	left := int64(len(data)) - off
	if left < ChunkHeaderSize {
		return 0, 0, nil, &FormatError{Offset: off, Msg: fmt.Sprintf("truncated chunk header: %d bytes left", left)}
	}
	kind = binary.LittleEndian.Uint32(data[off:])
	cpu = binary.LittleEndian.Uint32(data[off+4:])
	n := binary.LittleEndian.Uint64(data[off+8:])
	start := off + ChunkHeaderSize
	if n > uint64(left-ChunkHeaderSize) {
		return 0, 0, nil, &FormatError{Offset: off, Msg: fmt.Sprintf("chunk length %d runs past the end of the file (%d bytes left): the file is truncated", n, left-ChunkHeaderSize)}
	}
	if kind < ChunkTrace || kind > ChunkEnd {
		return 0, 0, nil, &FormatError{Offset: off, Msg: fmt.Sprintf("unknown chunk kind %d", kind)}
	}
	if kind != ChunkKallsyms && kind != ChunkEnd && cpu >= f.Header.NCPUs {
		return 0, 0, nil, &FormatError{Offset: off + 4, Msg: fmt.Sprintf("chunk for CPU %d, but the file has %d CPUs", cpu, f.Header.NCPUs)}
	}
	if kind == ChunkStats && n < StatsSize {
		return 0, 0, nil, &FormatError{Offset: start, Msg: "statistics chunk too short"}
	}
	return kind, cpu, data[start : start+int64(n)], nil
}

// chunk reads the chunk at off and returns the offset of the next one.
func (f *File) chunk(data []byte, off int64) (int64, *FormatError) {
	kind, cpu, body, ferr := f.checkChunk(data, off)
	if ferr != nil {
		return 0, ferr
	}
	start := off + ChunkHeaderSize
	n := int64(len(body))
	switch kind {
	case ChunkStats:
		f.Stats[cpu] = decodeStats(body)
		f.HasStats = true
	case ChunkKallsyms:
		f.Kallsyms = body
	case ChunkEnd:
		f.Complete = true
	default:
		f.Chunks = append(f.Chunks, Chunk{Kind: kind, CPU: cpu, Offset: start, Data: body})
	}
	return start + n + (8-n%8)%8, nil
}

// kindName names a chunk kind in messages.
func kindName(kind uint32) string {
	switch kind {
	case ChunkTrace:
		return "trace"
	case ChunkMTE:
		return "MTE"
	case ChunkStats:
		return "statistics"
	case ChunkKallsyms:
		return "kallsyms"
	case ChunkEnd:
		return "end"
	}
	return fmt.Sprintf("kind-%d", kind)
}

// plausibleChunk reports whether a chunk the writers could have written
// starts at off: a known kind, a CPU in range, a length within the file and
// the start every chunk of that kind has. It is stricter than chunk, so
// that bytes inside records are not taken for a chunk header. An empty
// trace or MTE chunk is only plausible with allowEmpty (where a chunk is
// expected; a search for one would find such zeros inside records).
func plausibleChunk(data []byte, off int64, ncpus uint32, allowEmpty bool) bool {
	size := int64(len(data))
	if off%8 != 0 || size-off < ChunkHeaderSize {
		return false
	}
	kind := binary.LittleEndian.Uint32(data[off:])
	cpu := binary.LittleEndian.Uint32(data[off+4:])
	n := binary.LittleEndian.Uint64(data[off+8:])
	start := off + ChunkHeaderSize
	if n > uint64(size-start) {
		return false
	}
	switch kind {
	case ChunkTrace, ChunkMTE:
		return cpu < ncpus && (trace.IsTimeHigh(data[start:start+int64(n)]) || allowEmpty && n == 0)
	case ChunkStats:
		return cpu < ncpus && n == StatsSize
	case ChunkKallsyms:
		c := byte(0)
		if n > 0 {
			c = data[start]
		}
		return cpu == 0 && (c >= '0' && c <= '9' || c >= 'a' && c <= 'f')
	case ChunkEnd:
		return cpu == 0 && n == 0
	}
	return false
}

// nextChunk returns the offset of the first plausible chunk at or after
// from and before to, or -1.
func nextChunk(data []byte, from, to int64, ncpus uint32) int64 {
	to = min(to, int64(len(data))-ChunkHeaderSize+1)
	for p := (from + 7) &^ 7; p < to; p += 8 {
		if k := data[p]; k >= ChunkTrace && k <= ChunkEnd && data[p+1]|data[p+2]|data[p+3] == 0 && plausibleChunk(data, p, ncpus, false) {
			return p
		}
	}
	return -1
}

// wholeRecords returns how many records at the start of b decode and how
// many bytes they take.
func wholeRecords(b []byte, base int64, cpu int, mte bool) (n int, size int) {
	r := trace.NewReader(b, base, cpu, mte, 0)
	var rec trace.Record
	for {
		ok, err := r.NextInto(&rec)
		if err != nil || !ok {
			if err == nil {
				size = len(b)
			}
			return n, size
		}
		n++
		size = int(r.Offset() - base)
	}
}

// checkLength is called, when salvaging, for a chunk at off that was read
// but is followed by an unreadable chunk header at next. If a chunk header
// starts inside its data, its length field is wrong: the chunk is cut
// there (to its whole records) and reading goes on from that header.
func (f *File) checkLength(data []byte, off, next int64) int64 {
	kind := binary.LittleEndian.Uint32(data[off:])
	if kind != ChunkTrace && kind != ChunkMTE {
		return next
	}
	start := off + ChunkHeaderSize
	p := nextChunk(data, start, next, f.Header.NCPUs)
	if p < 0 || p >= next {
		return next
	}
	cpu := binary.LittleEndian.Uint32(data[off+4:])
	n := binary.LittleEndian.Uint64(data[off+8:])
	body := data[start:p]
	kept, good := wholeRecords(body, start, int(cpu), kind == ChunkMTE)
	if good > 0 {
		f.Chunks[len(f.Chunks)-1].Data = body[:good]
	} else {
		f.Chunks = f.Chunks[:len(f.Chunks)-1]
	}
	f.damage = append(f.damage, Damage{Offset: start + int64(good), Lost: int64(len(body) - good), CPU: int(cpu), Kind: kind, Kept: kept,
		Msg: fmt.Sprintf("the %s chunk of CPU %d at byte offset %d gives a length of %d bytes, but a chunk starts at byte offset %d inside it: its first %d records were kept, %d bytes after them skipped",
			kindName(kind), cpu, off, n, p, kept, len(body)-good)})
	return p
}

func zeros(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// salvageChunk handles the chunk at off that chunk refused (ferr): it keeps
// what can be kept, records the damage and returns where to go on.
func (f *File) salvageChunk(data []byte, off int64, ferr *FormatError) int64 {
	size := int64(len(data))
	if size-off < ChunkHeaderSize {
		f.damage = append(f.damage, Damage{Offset: off, Lost: size - off, CPU: -1, Cut: true,
			Msg: fmt.Sprintf("the file ends inside a chunk header (%d of its %d bytes): it was cut short", size-off, ChunkHeaderSize)})
		return size
	}
	kind := binary.LittleEndian.Uint32(data[off:])
	cpu := binary.LittleEndian.Uint32(data[off+4:])
	n := binary.LittleEndian.Uint64(data[off+8:])
	start := off + ChunkHeaderSize
	fits := n <= uint64(size-start)
	// Where the next chunk is: after this one by its length when that
	// lands on a plausible chunk (or the end), else the first plausible
	// chunk header further on.
	next := int64(-1)
	if fits {
		if end := start + int64(n) + (8-int64(n)%8)%8; end >= size || plausibleChunk(data, end, f.Header.NCPUs, true) {
			next = end
		}
	}
	if next < 0 {
		next = nextChunk(data, start, size, f.Header.NCPUs)
	}
	stop := size
	if next >= 0 && next < size {
		stop = next
	}
	records := (kind == ChunkTrace || kind == ChunkMTE) && cpu < f.Header.NCPUs
	switch {
	case records && !fits:
		// The chunk's length runs past the end of the file. Either the
		// file was cut inside it (no chunk follows) or its length field
		// is wrong (one does): its whole records are read either way.
		body := data[start:stop]
		kept, good := wholeRecords(body, start, int(cpu), kind == ChunkMTE)
		if good > 0 {
			f.Chunks = append(f.Chunks, Chunk{Kind: kind, CPU: cpu, Offset: start, Data: body[:good]})
		}
		d := Damage{Offset: start + int64(good), Lost: int64(len(body) - good), CPU: int(cpu), Kind: kind, Kept: kept}
		if next < 0 {
			d.Cut = true
			d.Msg = fmt.Sprintf("the file is cut inside the %s chunk of CPU %d at byte offset %d (%d of its %d bytes present): its first %d records were kept (the TIME_HIGH record included); "+
				"the rest of it and whatever was written after it are lost", kindName(kind), cpu, off, size-start, n, kept)
		} else {
			d.Msg = fmt.Sprintf("the %s chunk of CPU %d at byte offset %d gives a length of %d bytes, but the next chunk starts at byte offset %d: its first %d records were kept, %d bytes after them skipped",
				kindName(kind), cpu, off, n, next, kept, len(body)-good)
		}
		f.damage = append(f.damage, d)
	case kind == ChunkKallsyms && !fits && next < 0:
		// Cut inside the kernel symbols: keep their whole lines.
		body := data[start:stop]
		good := len(body)
		for good > 0 && body[good-1] != '\n' {
			good--
		}
		f.Kallsyms = body[:good]
		f.damage = append(f.damage, Damage{Offset: start + int64(good), Lost: int64(len(body) - good), CPU: -1, Kind: kind, Cut: true,
			Msg: fmt.Sprintf("the file is cut inside the kallsyms chunk at byte offset %d (%d of its %d bytes present): kernel addresses past the cut are not named, and everything after it is lost", off, size-start, n)})
	default:
		d := Damage{Offset: off, Lost: stop - off, CPU: -1, Cut: !fits && next < 0}
		if records || (kind == ChunkStats && cpu < f.Header.NCPUs) {
			d.CPU, d.Kind = int(cpu), kind
		}
		if zeros(data[off:stop]) {
			d.Msg = fmt.Sprintf("%d zero bytes where a chunk should start (space allocated but never written: the writer was killed or the system crashed)", stop-off)
			d.Cut = stop == size
		} else if next >= 0 && next < size {
			d.Msg = fmt.Sprintf("%s: skipped %d bytes to the next chunk at byte offset %d", ferr.Msg, stop-off, next)
		} else {
			d.Msg = fmt.Sprintf("%s: the %d bytes from here to the end of the file were skipped (no chunk found in them)", ferr.Msg, stop-off)
		}
		f.damage = append(f.damage, d)
	}
	return stop
}

// Damage returns the places where a file read with Options.Salvage was
// damaged: those Parse found and those the last Records found.
func (f *File) Damage() []Damage {
	return append(append([]Damage(nil), f.damage...), f.recDamage...)
}

// maxDamageLines bounds the damage lines of Warnings.
const maxDamageLines = 8

// Warnings returns the lines a report should start with about the file
// itself: each damaged place (at most a few, then a count), a total of the
// records skipped, and missing statistics. Call it after Records.
func (f *File) Warnings() []string {
	var w []string
	all := f.Damage()
	for i, d := range all {
		if i == maxDamageLines {
			w = append(w, fmt.Sprintf("WARNING: damaged trace file: %d more damaged places not listed", len(all)-i))
			break
		}
		what := "damaged trace file"
		if d.Cut {
			what = "trace file cut short"
		}
		w = append(w, fmt.Sprintf("WARNING: %s: %s", what, d))
	}
	if len(f.recDamage) > 0 {
		var bytes int64
		cpus := map[int]bool{}
		for _, d := range f.recDamage {
			bytes += d.Lost
			cpus[d.CPU] = true
		}
		w = append(w, fmt.Sprintf("WARNING: damaged trace file: %s had a record that does not decode (%s affected, %d bytes of records skipped); every other segment was read",
			plural(len(f.recDamage), "segment"), plural(len(cpus), "CPU"), bytes))
	}
	if f.Header.Flags&FlagWriteError != 0 {
		w = append(w, "WARNING: a write to the trace file failed while tracing (a full disk?): the file ends on its last complete chunk, and the records that could not be written are counted as lost")
	}
	if !f.HasStats && !f.Complete {
		w = append(w, "WARNING: the trace file has no CPU statistics (tracing did not finish: kill -9, a crash or a full disk): records lost while tracing are not counted")
	}
	return w
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// Validate decodes every record of every chunk and returns the first
// problem (a *trace.DecodeError), as a reader refusing damaged files needs.
func (f *File) Validate() error {
	var rec trace.Record
	for _, c := range f.Chunks {
		if err := chunkRecords(c, &rec, nil); err != nil {
			return fmt.Errorf("%s chunk of CPU %d: %w", kindName(c.Kind), c.CPU, err)
		}
	}
	return nil
}

// Lost returns the total number of lost trace and MTE records.
func (f *File) Lost() (trace, mte uint64) {
	for _, s := range f.Stats {
		trace += s.Lost
		mte += s.MTELost
	}
	return
}
