package tprof

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"

	"perfinsp/analysis/a2n"
	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// Counting a flat report's ticks on every CPU at once. Reading a trace
// is most of a flat report (decoding records, most of it waiting on
// memory, and counting them), and each CPU's trace buffer can be read on
// its own once the mapping states are known: a tick belongs to the state
// its process was in at its time, and the states change only at MTE
// records (exec, segment, unmap, fork), which are few. So:
//
//  1. the MTE records are read (merged as Records merges them), giving
//     each process the times its mappings changed;
//  2. each CPU's trace buffer is read on a goroutine of its own: a tick's
//     state is the number of its process's changes at or before its time
//     (Records gives an MTE record before a tick of the same time), its
//     addresses are counted per (thread, state) by a tickWorker, the
//     counter the one reader uses too (ticks.go, serial.go);
//  3. the MTE records are applied in order, and before a change to a
//     process its counted addresses of the state that ends are located,
//     and before a record the threads whose first tick came earlier are
//     named: what the one reader does at the same points.
//
// Call stacks (UNWIND records) the same way: each CPU's distinct stacks
// per (process, state) with their ticks and first time, their PCs located
// when the state ends, the stacks that are then equal counted together,
// each where it was first met (its first time, buffer, place).
//
// The report is the one reader's (the tests compare them byte for byte).
// A trace this does not cover is read by the one reader: a filter, MTE or
// JIT records in a trace buffer, a buffer whose times go back, a record
// that does not decode.

// parallelMin is the trace size from which the ticks are counted on every
// CPU (below it the one reader is as fast; tests set it).
var parallelMin = 4 << 20

// errSequential stops a worker: the trace needs the one reader.
var errSequential = errors.New("the trace needs the one reader")

// tickRun is the counts of one thread in one state, user or kernel.
type tickRun struct {
	pid, tid, epoch uint32
	kernel          bool
	blk, lo, hi     int32 // counts[blk][lo:hi] of the worker
}

// countBlock is the number of counts of a worker's block (they are kept
// in blocks: a slice grown by appends copied its 8 MB several times).
const countBlock = 8192

// rawStack is one distinct UNWIND record of a CPU's (process, state):
// its thread, flags and PCs, its ticks, where it was first met.
type rawStack struct {
	pid, tid, epoch uint32
	flags           uint64
	pcs             string
	n               uint64
	time            uint64
	pos             int64 // its record's place in the buffer
	next            int32 // the stack met before it with its hash, or -1
}

// rawBlock is the number of a worker's raw stacks a block holds.
const rawBlock = 4096

// tickWorker counts ticks and stacks per thread and state of its process:
// one CPU's trace buffer it reads (countParallel), or the ticks and stacks
// the one reader gives it (countSerial). The workers are made one after
// the other, so that they were neighbours in memory: a line of the cache
// held one's last fields, written at every record, and the next one's
// first, read at every tick (false sharing: the readers 20-40 % slower
// when the allocator placed them so). A line's worth of padding at each
// end keeps every worker's fields in lines of its own.
type tickWorker struct {
	_       [cacheLine]byte
	seq     int
	changes map[uint32][]uint64 // per process, the times its mappings changed
	// live (the one reader's worker): each process's state, as the reader
	// has met its changes; the worker's changes are then not used
	live   map[uint32]uint32
	tc     *tickCounter
	counts [][]ipCount
	runs   []tickRun
	first  map[[2]uint32]uint64 // each thread's first tick
	total  uint64
	firstT uint64
	lastT  uint64
	event  *trace.Record // the last TPROF_EVENT_NAME record
	// the last tick's process and its state, kept at hand
	lastPid   uint32
	lastCh    []uint64
	lastEpoch int
	havePid   bool
	prevTime  uint64
	// the distinct stacks, per (process, state) by thread, flags, PCs
	raws     [][]rawStack
	nraw     int32
	rawIdx   map[uint64]int32 // by hash: the last stack of that hash
	seed     maphash.Seed
	pos      int64
	progress *Progress // the bytes read (a piece at a time)
	_        [cacheLine]byte
}

// cacheLine is the size of a line of the cache (x86-64, arm64: 64 bytes;
// some arm64 cores prefetch pairs of lines: 128 covers both).
const cacheLine = 128

func (w *tickWorker) raw(i int32) *rawStack { return &w.raws[i/rawBlock][i%rawBlock] }

func newTickWorker(seq int, changes map[uint32][]uint64) *tickWorker {
	w := &tickWorker{seq: seq, changes: changes, first: map[[2]uint32]uint64{}, rawIdx: map[uint64]int32{}, seed: maphash.MakeSeed()}
	w.tc = newTickCounter(func(t *tickThread, kernel bool, ip, n uint64) {
		nb := len(w.counts)
		if nb == 0 || len(w.counts[nb-1]) == countBlock {
			w.counts = append(w.counts, make([]ipCount, 0, countBlock))
			nb++
		}
		b := &w.counts[nb-1]
		if k := len(w.runs) - 1; k < 0 || w.runs[k].pid != t.pid || w.runs[k].tid != t.tid || w.runs[k].epoch != t.epoch ||
			w.runs[k].kernel != kernel || int(w.runs[k].blk) != nb-1 || int(w.runs[k].hi) != len(*b) {
			w.runs = append(w.runs, tickRun{pid: t.pid, tid: t.tid, epoch: t.epoch, kernel: kernel, blk: int32(nb - 1), lo: int32(len(*b)), hi: int32(len(*b))})
		}
		*b = append(*b, ipCount{ip, n})
		w.runs[len(w.runs)-1].hi++
	})
	return w
}

// epoch is pid's state at time t (t does not go back in a buffer), or
// (live) its state now.
func (w *tickWorker) epoch(pid uint32, t uint64) uint32 {
	if w.live != nil {
		if !w.havePid || pid != w.lastPid {
			w.lastPid, w.havePid = pid, true
			w.lastEpoch = int(w.live[pid])
		}
		return uint32(w.lastEpoch)
	}
	if !w.havePid || pid != w.lastPid {
		w.lastPid, w.havePid = pid, true
		w.lastCh = w.changes[pid]
		w.lastEpoch, _ = slices.BinarySearch(w.lastCh, t+1) // changes at or before t
		return uint32(w.lastEpoch)
	}
	for w.lastEpoch < len(w.lastCh) && w.lastCh[w.lastEpoch] <= t {
		w.lastEpoch++
	}
	return uint32(w.lastEpoch)
}

// fieldsAt returns where the first n fixed fields of a code's records
// are (from the code table) and the records' size with its fixed fields.
func fieldsAt(major uint16, minor uint32, n int) ([]int, int) {
	offs, size, ok := trace.FieldOffsets(major, minor)
	if !ok || len(offs) < n {
		panic(fmt.Sprintf("tprof: the code table has no record 0x%x/0x%x of %d fields", major, minor, n))
	}
	return offs, size
}

// Where the fields of TPROF_TICK (pid, tid, ip, flags) and UNWIND (pid,
// tid, flags; its PCs follow, TrailingBytes) records are.
var (
	tickAt, tickSize     = fieldsAt(trace.MajorTprof, trace.TprofTick, 4)
	unwindAt, unwindSize = fieldsAt(trace.MajorUnwind, trace.UnwindTick, 3)
)

// next takes the time of the buffer's next record: false if it goes
// back (the trace needs the one reader).
func (w *tickWorker) next(t uint64) bool {
	if t < w.prevTime {
		return false
	}
	w.prevTime = t
	w.pos++
	return true
}

// pieceSize is how much of a chunk a worker reads at a time into memory
// of its own (ReadData): a piece used again stays in the CPU's cache
// (tests set it; at least trace.MaxRecordSize).
var pieceSize = 256 << 10

// read reads one CPU's trace buffer, a piece at a time: its ticks and
// stacks (most of it) from their bytes, the other records decoded.
func (w *tickWorker) read(f *nrm2.File, s nrm2.BufferStream) error {
	buf := make([]byte, pieceSize+trace.MaxRecordSize)
	for _, c := range s.Chunks {
		r := trace.NewReader(nil, c.Offset, int(c.CPU), c.Kind == nrm2.ChunkMTE, 0)
		kept := 0 // a record cut at the last piece's end, moved to buf's start
		for off := 0; ; {
			n := min(pieceSize, len(c.Data)-off)
			if err := f.ReadData(c, buf[kept:kept+n], off); err != nil {
				return err
			}
			r.Refill(buf[:kept+n], c.Offset+int64(off-kept))
			w.progress.add(n)
			off += n
			last := off == len(c.Data)
			ended, err := w.records(r, last)
			if err != nil {
				return err
			}
			if last {
				break
			}
			if ended {
				// zero padding before the chunk's end: the rest must be
				// zero too (if not, the one reader reports it)
				if err := zeroRest(f, c, off, buf); err != nil {
					return err
				}
				w.progress.add(len(c.Data) - off)
				break
			}
			kept = copy(buf, buf[kept+n-r.Buffered():kept+n])
		}
	}
	return nil
}

// zeroRest checks that c's data from off on is zero bytes.
func zeroRest(f *nrm2.File, c nrm2.Chunk, off int, buf []byte) error {
	for off < len(c.Data) {
		n := min(len(buf), len(c.Data)-off)
		if err := f.ReadData(c, buf[:n], off); err != nil {
			return err
		}
		if slices.ContainsFunc(buf[:n], func(b byte) bool { return b != 0 }) {
			return errSequential
		}
		off += n
	}
	return nil
}

// records reads r's records, all of them or (a piece before the last)
// while a whole record is sure to be there; ended: r reached the end of
// its records (padding or the buffer's end).
func (w *tickWorker) records(r *trace.Reader, all bool) (ended bool, err error) {
	var rec trace.Record
	le := binary.LittleEndian
	for all || r.Buffered() >= trace.MaxRecordSize {
		if b, t, ok := r.NextOf(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, tickSize); ok {
			if !w.next(t) {
				return false, errSequential
			}
			w.tick(r.CPU(), t, le.Uint32(b[tickAt[0]:]), le.Uint32(b[tickAt[1]:]), le.Uint64(b[tickAt[2]:]), le.Uint32(b[tickAt[3]:]))
			continue
		}
		if b, t, ok := r.NextOf(trace.MajorUnwind, trace.UnwindTick, trace.LayoutBytes, unwindSize); ok {
			pcs, ok := trace.TrailingBytes(b, unwindSize)
			if !ok || !w.next(t) {
				return false, errSequential // (the one reader reports a bad count)
			}
			w.stack(t, le.Uint32(b[unwindAt[0]:]), le.Uint32(b[unwindAt[1]:]), uint64(le.Uint32(b[unwindAt[2]:])), pcs)
			continue
		}
		ok, err := r.NextInto(&rec)
		if err != nil {
			return false, err
		}
		if !ok {
			return true, nil
		}
		if err := w.record(&rec); err != nil {
			return false, err
		}
	}
	return false, nil
}

// tick counts one tick: the one place a tick becomes a count. It
// reports whether the thread is new to the worker's counter (its first
// tick, or its first since its process's state changed).
func (w *tickWorker) tick(cpu int, time uint64, pid, tid uint32, ip uint64, flags uint32) bool {
	t, isNew := w.tc.thread(cpu, pid, tid, w.epoch(pid, time))
	if isNew {
		if _, ok := w.first[[2]uint32{pid, tid}]; !ok {
			w.first[[2]uint32{pid, tid}] = time
		}
	}
	w.tc.add(t, uint64(flags)&trace.TprofKernel != 0, ip)
	w.total++
	if w.firstT == 0 || time < w.firstT {
		w.firstT = time
	}
	w.lastT = max(w.lastT, time)
	return isNew
}

func (w *tickWorker) record(rec *trace.Record) error {
	if !w.next(rec.Time) {
		return errSequential
	}
	switch rec.Major {
	case trace.MajorTprof:
		w.tick(rec.CPU, rec.Time, uint32(rec.Field(0)), uint32(rec.Field(1)), rec.Field(2), uint32(rec.Field(3)))
	case trace.MajorUnwind:
		if rec.Minor != trace.UnwindTick {
			return nil // a wait's stack (UNWIND_SWITCH): no tick's
		}
		w.stack(rec.Time, uint32(rec.Field(0)), uint32(rec.Field(1)), rec.Field(2), []byte(rec.Str))
	case trace.MajorMTE, trace.MajorJITLoad:
		return errSequential
	case trace.MajorSys:
		if rec.Minor == trace.SysEvent {
			e := *rec
			e.Fixed = slices.Clone(rec.Fixed)
			w.event = &e
		}
	}
	return nil
}

// stack keeps an UNWIND record: one more tick of a stack met before in
// its (process, state), or a new one. The stacks are found by a hash of
// (process, state, thread, flags, PCs), those of one hash chained: a
// table keyed by the record's bytes made a string of each new stack and
// hashed it again on every lookup (half of the many-process stacks
// report's reading).
func (w *tickWorker) stack(time uint64, pid, tid uint32, flags uint64, b []byte) {
	n := len(b) / 8
	if n == 0 {
		return
	}
	epoch := w.epoch(pid, time)
	pcs := b[:8*n]
	var h maphash.Hash
	h.SetSeed(w.seed)
	var head [20]byte
	binary.LittleEndian.PutUint32(head[0:], pid)
	binary.LittleEndian.PutUint32(head[4:], epoch)
	binary.LittleEndian.PutUint32(head[8:], tid)
	binary.LittleEndian.PutUint64(head[12:], flags)
	h.Write(head[:])
	h.Write(pcs)
	sum := h.Sum64()
	first, ok := w.rawIdx[sum]
	if ok {
		for i := first; i >= 0; i = w.raw(i).next {
			rs := w.raw(i)
			if rs.pid == pid && rs.epoch == epoch && rs.tid == tid && rs.flags == flags && rs.pcs == string(pcs) {
				rs.n++
				return
			}
		}
	} else {
		first = -1
	}
	if w.nraw%rawBlock == 0 {
		w.raws = append(w.raws, make([]rawStack, 0, rawBlock))
	}
	blk := &w.raws[len(w.raws)-1]
	*blk = append(*blk, rawStack{pid: pid, tid: tid, epoch: epoch, flags: flags, pcs: string(pcs), n: 1, time: time, pos: w.pos, next: first})
	w.rawIdx[sum] = w.nraw
	w.nraw++
}

// runRef is a run of a worker (or, of a state's stacks, a raw stack):
// workers[w].runs[r].
type runRef struct{ w, r int32 }

// sideLocator locates the kernel's counts on a goroutine of its own,
// beside the replay (kernel addresses are located alike at any time): its
// Locs numbered in a locSet of its own, numbered again in the report's by
// merge, on the replay's goroutine. (The replay, on one CPU, is a third
// of a many-process flat report, and the kernel's counts a sixth of the
// replay. The user counts of the states open at the end are not located
// here: they would make more Locs to name after the merge than they save,
// and the namer, one goroutine, would end later.)
type sideLocator struct {
	workers []*tickWorker
	done    chan struct{}
	set     locSet
	locs    [][]a2n.Loc // in blocks (fresh memory is dear: no copies)
	nlocs   int32
	ents    [][]sideEntry
}

// sideEntry is a thread's count of the side's Loc loc.
type sideEntry struct {
	pid, tid uint32
	loc      int32
	n        uint64
}

const sideBlock = 4096

func startSide(r *a2n.Resolver, workers []*tickWorker, kernelRuns []runRef) *sideLocator {
	s := &sideLocator{workers: workers, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		add := func(l a2n.Loc) int32 {
			if s.nlocs%sideBlock == 0 {
				s.locs = append(s.locs, make([]a2n.Loc, 0, sideBlock))
			}
			s.locs[len(s.locs)-1] = append(s.locs[len(s.locs)-1], l)
			s.nlocs++
			return s.nlocs - 1
		}
		known := map[uint64]int32{} // (52 k counts of 7 k addresses on a many-process trace)
		for _, g := range kernelRuns {
			w := s.workers[g.w]
			run := &w.runs[g.r]
			for _, c := range w.counts[run.blk][run.lo:run.hi] {
				idx, ok := known[c.ip]
				if !ok {
					idx = s.set.index(r.LocateKernel(c.ip), add)
					known[c.ip] = idx
				}
				if k := len(s.ents); k == 0 || len(s.ents[k-1]) == sideBlock {
					s.ents = append(s.ents, make([]sideEntry, 0, sideBlock))
				}
				b := &s.ents[len(s.ents)-1]
				*b = append(*b, sideEntry{run.pid, run.tid, idx, c.n})
			}
		}
	}()
	return s
}

// merge waits for the side's end and adds its counts, its Locs numbered
// by index.
func (s *sideLocator) merge(b *builder) {
	<-s.done
	num := make([]int32, 0, s.nlocs)
	for _, blk := range s.locs {
		for i := range blk {
			num = append(num, b.index(blk[i]))
		}
	}
	for _, blk := range s.ents {
		for _, e := range blk {
			b.addEntry(e.pid, e.tid, num[e.loc], e.n)
		}
	}
}

// isChange reports whether an MTE or JIT record changes its process's
// mappings, and which process (a fork: the child).
func isChange(rec *trace.Record) (uint32, bool) {
	switch {
	case rec.Major == trace.MajorJITLoad:
		return uint32(rec.Field(0)), true
	case rec.Major != trace.MajorMTE:
		return 0, false
	case rec.Minor == trace.MTEFork:
		return uint32(rec.Field(2)), true
	case rec.Minor == trace.MTEExec || rec.Minor == trace.MTESegment || rec.Minor == trace.MTEUnmap:
		return uint32(rec.Field(0)), true
	}
	return 0, false
}
