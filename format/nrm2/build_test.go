package nrm2

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"perfinsp/format/trace"
	"perfinsp/format/tracebuf"
)

// tick is one TPROF_TICK of a built trace and where it ends in the file.
type tick struct {
	id    uint64 // the tick's ip: unique in the trace
	cpu   int
	start int64 // file offset of the record
	end   int64 // file offset just past the record
	chunk int   // index of its chunk in built.chunks
}

// built is a trace written the way the backends write one: per-CPU
// segmented buffers (the daemon's tracebuf), one chunk per segment, the
// CPUs' segments interleaved as a continuous-mode drain writes them, then
// the statistics and the END chunk.
type built struct {
	data   []byte
	ticks  []tick
	chunks []int64 // file offset of every chunk header, in order
	ends   []int64 // file offset just past every chunk (its padding included)
	kinds  []uint32
	cpus   []int
	highs  []int64 // file offsets of the TIME_HIGH records that are not first in their chunk
}

// buildTrace writes a trace of ncpu CPUs with perCPU ticks each into a
// buffer of bufSize bytes per CPU and returns its bytes and an index of it.
// The time stamps cross a 2^32 boundary, so segments hold TIME_HIGH records
// after their first one too.
func buildTrace(tb testing.TB, ncpu, perCPU, bufSize int) *built {
	tb.Helper()
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	segs := make([][][]byte, ncpu)
	mte := make([][][]byte, ncpu)
	stats := make([]CPUStats, ncpu)
	for cpu := 0; cpu < ncpu; cpu++ {
		tbuf, err := tracebuf.New(bufSize, tracebuf.Normal)
		must(err)
		mbuf, err := tracebuf.New(tracebuf.MinSegment, tracebuf.Normal)
		must(err)
		pid := uint64(100 + cpu)
		if ok, err := mbuf.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 1, []uint64{pid, 1}, "prog"); !ok || err != nil {
			tb.Fatalf("MTE write: %v %v", ok, err)
		}
		tm := uint64(1<<32 - 5000)
		for i := 0; i < perCPU; i++ {
			tm += 7 + uint64(cpu)
			id := uint64(0x400000 + (cpu*perCPU+i)*16)
			ok, err := tbuf.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, tm, []uint64{pid, pid, id, 0}, "")
			must(err)
			if !ok {
				tb.Fatalf("buffer of %d bytes too small for %d ticks", bufSize, perCPU)
			}
		}
		segs[cpu] = tbuf.Snapshot()
		mte[cpu] = mbuf.Snapshot()
		stats[cpu] = CPUStats{Records: uint64(perCPU), MTERecords: 1}
	}
	path := filepath.Join(tb.TempDir(), "built.nrm2")
	w, err := Create(path, Header{NCPUs: uint32(ncpu), Mode: ModeCont, TraceBufSize: uint64(bufSize), MTEBufSize: tracebuf.MinSegment,
		SegmentSize: uint64(tracebuf.SegmentSize(bufSize)), RateHz: 1000, KernelRelease: "6.1.0-test", Hostname: "host"})
	must(err)
	must(w.WriteChunk(ChunkKallsyms, 0, []byte("ffffffff81000000 T _stext\nffffffff81000100 T do_syscall\n")))
	for cpu := 0; cpu < ncpu; cpu++ {
		for _, s := range mte[cpu] {
			must(w.WriteChunk(ChunkMTE, uint32(cpu), s))
		}
	}
	for i := 0; ; i++ {
		any := false
		for cpu := 0; cpu < ncpu; cpu++ {
			if i < len(segs[cpu]) {
				must(w.WriteChunk(ChunkTrace, uint32(cpu), segs[cpu][i]))
				any = true
			}
		}
		if !any {
			break
		}
	}
	must(w.Close(0, stats))
	data, err := os.ReadFile(path)
	must(err)
	return &built{data: data}
}

// index walks the chunk headers and decodes every record with
// trace.Decode, independently of Parse and Records, to know where each
// chunk and each tick lies in the file.
func (b *built) index(tb testing.TB) {
	tb.Helper()
	off := int64(HeaderSize)
	for off < int64(len(b.data)) {
		kind := binary.LittleEndian.Uint32(b.data[off:])
		cpu := int(binary.LittleEndian.Uint32(b.data[off+4:]))
		n := int64(binary.LittleEndian.Uint64(b.data[off+8:]))
		start := off + ChunkHeaderSize
		b.chunks = append(b.chunks, off)
		b.kinds = append(b.kinds, kind)
		b.cpus = append(b.cpus, cpu)
		if kind == ChunkTrace {
			for p := start; p < start+n; {
				r, size, err := trace.Decode(b.data[p:start+n], p)
				if err != nil {
					tb.Fatal(err)
				}
				if r.Major == trace.MajorTprof {
					b.ticks = append(b.ticks, tick{id: r.Fixed[2], cpu: cpu, start: p, end: p + int64(size), chunk: len(b.chunks) - 1})
				}
				if r.Major == trace.MajorSys && r.Minor == trace.SysTimeHigh && p != start {
					b.highs = append(b.highs, p)
				}
				p += int64(size)
			}
		}
		off = start + (n+7)&^7
		b.ends = append(b.ends, off)
	}
}

// ids returns the tick ids Records delivers for f, in merge order, and
// checks that times never go backwards.
func ids(tb testing.TB, f *File) []uint64 {
	tb.Helper()
	var out []uint64
	var last uint64
	err := f.Records(func(r *trace.Record) error {
		if r.Time < last {
			tb.Fatalf("time went backwards: %d after %d", r.Time, last)
		}
		last = r.Time
		if r.Major == trace.MajorTprof {
			out = append(out, r.Field(2))
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}
