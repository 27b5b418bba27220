package tprof

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"

	"perfinsp/libperfutil/a2n"
	"perfinsp/libperfutil/nrm2"
	"perfinsp/libperfutil/trace"
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
//     addresses are counted per (thread, state) as the one reader counts
//     them (ticks.go);
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

// tickWorker reads one CPU's trace buffer. The workers are made one after
// the other, so that they were neighbours in memory: a line of the cache
// held one's last fields, written at every record, and the next one's
// first, read at every tick (false sharing: the readers 20-40 % slower
// when the allocator placed them so). A line's worth of padding at each
// end keeps every worker's fields in lines of its own.
type tickWorker struct {
	_       [cacheLine]byte
	seq     int
	changes map[uint32][]uint64 // per process, the times its mappings changed
	tc      *tickCounter
	counts  [][]ipCount
	runs    []tickRun
	first   map[[2]uint32]uint64 // each thread's first tick
	total   uint64
	firstT  uint64
	lastT   uint64
	event   *trace.Record // the last TPROF_EVENT_NAME record
	// the last tick's process and its state, kept at hand
	lastPid   uint32
	lastCh    []uint64
	lastEpoch int
	havePid   bool
	prevTime  uint64
	// the distinct stacks, per (process, state) by thread, flags, PCs
	raws   [][]rawStack
	nraw   int32
	rawIdx map[uint64]int32 // by hash: the last stack of that hash
	seed   maphash.Seed
	pos    int64
	_      [cacheLine]byte
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

// epoch is pid's state at time t (t does not go back in a buffer).
func (w *tickWorker) epoch(pid uint32, t uint64) uint32 {
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

// tick counts one tick.
func (w *tickWorker) tick(cpu int, time uint64, pid, tid uint32, ip uint64, flags uint32) {
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
}

func (w *tickWorker) record(rec *trace.Record) error {
	if !w.next(rec.Time) {
		return errSequential
	}
	switch rec.Major {
	case trace.MajorTprof:
		w.tick(rec.CPU, rec.Time, uint32(rec.Field(0)), uint32(rec.Field(1)), rec.Field(2), uint32(rec.Field(3)))
	case trace.MajorUnwind:
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

// countParallel counts the ticks of f as above, if it can: locate names
// an address of a process as its mappings are when called (kernel: any
// time), userLocator gives a locate of one process's user addresses
// (while no record is applied), index numbers a Loc as locate numbers it,
// add takes a thread's count of a located address. It applies
// the MTE records to r and fills rep's totals and names. False: nothing
// was changed, the trace needs the one reader.
func countParallel(b *builder) bool {
	f, r, rep := b.f, b.r, b.rep
	size := 0
	var bufs []nrm2.BufferStream
	for _, s := range f.BufferStreams() {
		for _, c := range s.Chunks {
			size += len(c.Data)
		}
		if s.Kind == nrm2.ChunkTrace {
			bufs = append(bufs, s)
		}
	}
	if size < parallelMin || len(bufs) < 2 {
		return false
	}
	// 1. The MTE records, kept (they are few) for step 3, in blocks and
	// their fields in blocks of their own (a slice grown by appends,
	// each record's fields an allocation, measurably delays the
	// workers' start on a many-process trace).
	const mteBlock, fieldBlock = 1024, 8192
	var mte [][]trace.Record
	var fields []uint64
	changes := map[uint32][]uint64{}
	prev := uint64(0)
	err := f.RecordsOf(nrm2.ChunkMTE, func(rec *trace.Record) error {
		if rec.Time < prev {
			return errSequential
		}
		prev = rec.Time
		if rec.Major == trace.MajorUnwind || rec.Major == trace.MajorTprof {
			return errSequential
		}
		if rec.Major == trace.MajorSys && rec.Minor == trace.SysTimeHigh {
			return nil
		}
		if pid, ok := isChange(rec); ok {
			changes[pid] = append(changes[pid], rec.Time)
		}
		if len(mte) == 0 || len(mte[len(mte)-1]) == mteBlock {
			mte = append(mte, make([]trace.Record, 0, mteBlock))
		}
		if cap(fields)-len(fields) < len(rec.Fixed) {
			fields = make([]uint64, 0, max(fieldBlock, len(rec.Fixed)))
		}
		n := len(fields)
		fields = append(fields, rec.Fixed...)
		c := *rec
		c.Fixed = fields[n:len(fields):len(fields)]
		mte[len(mte)-1] = append(mte[len(mte)-1], c)
		return nil
	})
	if err != nil || len(f.Damage()) > 0 {
		return false
	}
	rep.parallel = true
	// 2. Each CPU's ticks.
	workers := make([]*tickWorker, len(bufs))
	errs := make([]error, len(bufs))
	var wg sync.WaitGroup
	for i, s := range bufs {
		workers[i] = newTickWorker(s.Seq, changes)
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := workers[i]
			if errs[i] = w.read(f, s); errs[i] == nil {
				w.tc.flushAll()
			}
		}()
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			rep.parallel = false
			return false
		}
	}
	// 3. Located and named in the order of the MTE records.
	type firstTick struct {
		pid, tid uint32
		time     uint64
		seq      int
	}
	var firsts []firstTick
	seen := map[[2]uint32]int{}
	groups := map[[2]uint32][]runRef{}    // (pid, epoch) -> runs
	rawGroups := map[[2]uint32][]runRef{} // (pid, epoch) -> raw stacks
	var kernelRuns []runRef
	for wi, w := range workers {
		rep.Total += w.total
		if w.total > 0 {
			if rep.First == 0 || w.firstT < rep.First {
				rep.First = w.firstT
			}
			rep.Last = max(rep.Last, w.lastT)
		}
		for k, t := range w.first {
			if i, ok := seen[k]; ok {
				if ft := &firsts[i]; t < ft.time || t == ft.time && w.seq < ft.seq {
					ft.time, ft.seq = t, w.seq
				}
				continue
			}
			seen[k] = len(firsts)
			firsts = append(firsts, firstTick{k[0], k[1], t, w.seq})
		}
		for ri, run := range w.runs {
			if run.kernel {
				kernelRuns = append(kernelRuns, runRef{int32(wi), int32(ri)})
				continue
			}
			k := [2]uint32{run.pid, run.epoch}
			groups[k] = append(groups[k], runRef{int32(wi), int32(ri)})
		}
		for i := int32(0); i < w.nraw; i++ {
			rs := w.raw(i)
			k := [2]uint32{rs.pid, rs.epoch}
			rawGroups[k] = append(rawGroups[k], runRef{int32(wi), i})
		}
	}
	// The stacks once located: one a (thread, frames, truncated), its
	// ticks and where it was first met.
	type stackAt struct {
		pid, tid  uint32
		blk, off  int32 // frames[blk][off:off+nf]
		nf        int32
		kernel    uint16
		truncated bool
		n         uint64
		time      uint64
		seq       int
		pos       int64
		next      int32 // the stack located before it with its hash, or -1
	}
	// (in blocks: a slice grown by appends copied its 28 MB, and the
	// frames' 40 MB, several times on a many-process trace)
	const locBlock = 4096
	var located [][]stackAt
	nloc := int32(0)
	at := func(j int32) *stackAt { return &located[j/locBlock][j%locBlock] }
	var frames [][]int32
	var frameBuf []int32
	var keyBuf []byte
	nraws := 0
	for _, w := range workers {
		nraws += int(w.nraw)
	}
	// The located stacks by a hash of (pid, tid, truncated, frames), those
	// of one hash chained (as the raw stacks are), the table sized for
	// them (grown from empty, it was a sixth of the replay).
	locatedIdx := make(map[uint64]int32, nraws)
	seed := maphash.MakeSeed()
	// locateStacks locates a state's stacks; pcs are its tables of
	// located PCs, user and kernel frames (as the one reader's: not its
	// ticks').
	locateStacks := func(pid uint32, gs []runRef, pcs [2]map[uint64]int32) {
		for _, g := range gs {
			w := workers[g.w]
			rs := w.raw(g.r)
			n := len(rs.pcs) / 8
			nk := int(rs.flags >> trace.UnwindKernShift)
			frameBuf = frameBuf[:0]
			for i := n - 1; i >= 0; i-- { // root first
				pc := le64(rs.pcs[8*i:])
				if i > 0 && i != nk {
					pc-- // a return address: name the call, not what follows it
				}
				t := pcs[0]
				if i < nk {
					t = pcs[1]
				}
				idx, ok := t[pc]
				if !ok {
					idx = b.locate(pid, pc, i < nk)
					t[pc] = idx
				}
				frameBuf = append(frameBuf, idx)
			}
			truncated := rs.flags&trace.UnwindTruncated != 0
			keyBuf = append(keyBuf[:0], byte(pid), byte(pid>>8), byte(pid>>16), byte(pid>>24), byte(rs.tid), byte(rs.tid>>8), byte(rs.tid>>16), byte(rs.tid>>24), byte(rs.flags&trace.UnwindTruncated))
			for _, f := range frameBuf {
				keyBuf = append(keyBuf, byte(f), byte(f>>8), byte(f>>16), byte(f>>24))
			}
			sum := maphash.Bytes(seed, keyBuf)
			j, ok := locatedIdx[sum]
			if ok {
				for ; j >= 0; j = at(j).next {
					if st := at(j); st.pid == pid && st.tid == rs.tid && st.truncated == truncated && slices.Equal(frames[st.blk][st.off:st.off+st.nf], frameBuf) {
						break
					}
				}
				ok = j >= 0
			}
			if !ok {
				prev := int32(-1)
				if p, known := locatedIdx[sum]; known {
					prev = p
				}
				j = nloc
				locatedIdx[sum] = j
				nf := len(frames)
				if nf == 0 || cap(frames[nf-1])-len(frames[nf-1]) < len(frameBuf) {
					frames = append(frames, make([]int32, 0, max(1<<16, len(frameBuf))))
					nf++
				}
				fb := &frames[nf-1]
				if nloc%locBlock == 0 {
					located = append(located, make([]stackAt, 0, locBlock))
				}
				located[len(located)-1] = append(located[len(located)-1], stackAt{pid: pid, tid: rs.tid, blk: int32(nf - 1), off: int32(len(*fb)), nf: int32(len(frameBuf)),
					kernel: uint16(min(nk, n)), truncated: truncated, time: rs.time, seq: w.seq, pos: rs.pos, next: prev})
				nloc++
				*fb = append(*fb, frameBuf...)
			}
			st := at(j)
			st.n += rs.n
			if rs.time < st.time || rs.time == st.time && (w.seq < st.seq || w.seq == st.seq && rs.pos < st.pos) {
				st.time, st.seq, st.pos, st.kernel = rs.time, w.seq, rs.pos, uint16(min(nk, n))
			}
			rep.StackTicks += rs.n
			if truncated {
				rep.TruncatedStacks += rs.n
			}
		}
	}
	slices.SortFunc(firsts, func(a, b firstTick) int {
		if a.time != b.time {
			if a.time < b.time {
				return -1
			}
			return 1
		}
		return a.seq - b.seq
	})
	nameUpTo := func(t uint64, all bool) {
		for len(firsts) > 0 && (all || firsts[0].time < t) {
			ft := firsts[0]
			firsts = firsts[1:]
			if _, ok := rep.ThreadNm[[2]uint32{ft.pid, ft.tid}]; !ok {
				rep.ThreadNm[[2]uint32{ft.pid, ft.tid}] = r.ThreadName(ft.pid, ft.tid)
				rep.ProcName[ft.pid] = r.ProcessName(ft.pid)
			}
		}
	}
	epochs := map[uint32]uint32{}
	// countRuns locates the user addresses of the runs' counts and adds
	// the counts: a process state's addresses each time met (a run's are
	// distinct, the repeats across its threads and CPUs were a sixth of
	// 163 k, and a table of them cost more than locating those again:
	// sized per state, it was fresh memory).
	countRuns := func(pid uint32, gs []runRef) {
		if len(gs) == 0 {
			return
		}
		loc := b.userLocator(pid)
		for _, g := range gs {
			w := workers[g.w]
			run := &w.runs[g.r]
			for _, c := range w.counts[run.blk][run.lo:run.hi] {
				b.addEntry(run.pid, run.tid, loc.locate(c.ip), c.n)
			}
		}
	}
	locateGroup := func(pid, epoch uint32) {
		k := [2]uint32{pid, epoch}
		gs := groups[k]
		rg := rawGroups[k]
		delete(groups, k)
		delete(rawGroups, k)
		// The state's tables of its stacks' located PCs, sized for (a
		// bound of) them: grown from empty, they were a tenth of the
		// replay.
		if len(rg) > 0 {
			npc := 0
			for _, g := range rg {
				npc += len(workers[g.w].raw(g.r).pcs) / 8
			}
			locateStacks(pid, rg, [2]map[uint64]int32{make(map[uint64]int32, min(npc, 1<<16)), {}})
		}
		countRuns(pid, gs)
	}
	side := startSide(r, workers, kernelRuns)
	var lastEvent *trace.Record
	lastEventSeq := -1
	for _, blk := range mte {
		for i := range blk {
			rec := &blk[i]
			nameUpTo(rec.Time, false)
			if pid, ok := isChange(rec); ok {
				locateGroup(pid, epochs[pid])
				epochs[pid]++
			}
			if rec.Major == trace.MajorMTE || rec.Major == trace.MajorJITLoad {
				r.Apply(rec)
			}
			// A process's last change applied, its mappings are those of
			// the end: its last state is located now, not after every
			// record (the long-lived processes' states, most of the Locs,
			// would otherwise come in a burst at the end, named after the
			// replay, on the critical path).
			if pid, ok := isChange(rec); ok && int(epochs[pid]) == len(changes[pid]) {
				locateGroup(pid, epochs[pid])
			}
			if rec.Major == trace.MajorSys && rec.Minor == trace.SysEvent {
				lastEvent = rec
			}
		}
	}
	nameUpTo(0, true)
	// The states still open at the end (of processes without a change),
	// a process after the other.
	rest := make([][2]uint32, 0, len(groups)+len(rawGroups))
	for k := range groups {
		rest = append(rest, k)
	}
	for k := range rawGroups {
		if _, ok := groups[k]; !ok {
			rest = append(rest, k)
		}
	}
	slices.SortFunc(rest, func(a, b [2]uint32) int {
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		return int(a[1]) - int(b[1])
	})
	for _, k := range rest {
		locateGroup(k[0], k[1])
	}
	side.merge(b)
	// The event-based sampling name: the last record in Records' order
	// (an MTE record before a trace record of the same time).
	for _, w := range workers {
		if e := w.event; e != nil {
			if lastEvent == nil || e.Time > lastEvent.Time || e.Time == lastEvent.Time && (lastEvent.MTE || w.seq > lastEventSeq) {
				lastEvent, lastEventSeq = e, w.seq
			}
		}
	}
	if lastEvent != nil {
		rep.Event, rep.EventPeriod = lastEvent.Str, lastEvent.Field(2)
	}
	// The stacks in the order they were first met.
	order := make([]int32, nloc)
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(i, j int32) int {
		a, b := at(i), at(j)
		switch {
		case a.time != b.time:
			return cmp.Compare(a.time, b.time)
		case a.seq != b.seq:
			return a.seq - b.seq
		}
		return cmp.Compare(a.pos, b.pos)
	})
	for _, i := range order {
		st := at(i)
		b.addStack(st.pid, st.tid, frames[st.blk][st.off:st.off+st.nf], st.kernel, st.truncated, st.n)
	}
	return true
}
