package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	"perfinsp/internal/tracetest"
)

// chunked writes a trace of 2 CPUs whose ticks are in chunks of 25 (each a
// segment starting with TIME_HIGH), the CPUs' chunks interleaved. It
// returns the path and, for every tick, the file offsets of its record.
func chunked(t *testing.T, dir string) (path string, starts, ends []int64) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	path = filepath.Join(dir, "chunked.nrm2")
	w, err := nrm2.Create(path, nrm2.Header{NCPUs: 2, Mode: nrm2.ModeCont, RateHz: 1000, KernelRelease: "6.1.0", Hostname: "h"})
	must(err)
	ks := []byte("ffffffff81000100 T do_syscall\n")
	must(w.WriteChunk(nrm2.ChunkKallsyms, 0, ks))
	off := int64(nrm2.HeaderSize) + nrm2.ChunkHeaderSize + int64(len(ks)+7)&^7
	var m trace.Writer
	must(m.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 1, []uint64{500, 1}, "prog"))
	must(w.WriteChunk(nrm2.ChunkMTE, 0, m.Buf))
	off += nrm2.ChunkHeaderSize + int64(len(m.Buf)+7)&^7
	tm := uint64(1000)
	for c := 0; c < 8; c++ {
		var tr trace.Writer
		for i := 0; i < 25; i++ {
			tm += 10
			at := off + nrm2.ChunkHeaderSize + int64(len(tr.Buf))
			must(tr.Write(trace.MajorTprof, trace.TprofTick, trace.LayoutFixed, tm, []uint64{500, 500, 0xffffffff81000110, trace.TprofKernel}, ""))
			if i == 0 {
				at += trace.TimeHighSize
			}
			starts = append(starts, at)
			ends = append(ends, off+nrm2.ChunkHeaderSize+int64(len(tr.Buf)))
		}
		must(w.WriteChunk(nrm2.ChunkTrace, uint32(c%2), tr.Buf))
		off += nrm2.ChunkHeaderSize + int64(len(tr.Buf)+7)&^7
	}
	must(w.Close(0, []nrm2.CPUStats{{Records: 100}, {Records: 100}}))
	return path, starts, ends
}

var totalRE = regexp.MustCompile(`Total Ticks   : (\d+)`)

func totalTicks(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "tprof.out"))
	if err != nil {
		t.Fatal(err)
	}
	m := totalRE.FindSubmatch(b)
	if m == nil {
		t.Fatalf("no total in tprof.out:\n%s", b)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestTruncatedTraceIsSalvaged: a trace cut inside its fifth chunk gives
// reports of every tick recorded before the cut, and post.show and stderr
// say where it was cut and that the statistics are missing; -strict
// refuses it in one line.
func TestTruncatedTraceIsSalvaged(t *testing.T) {
	dir := t.TempDir()
	path, _, ends := chunked(t, dir)
	good, _ := os.ReadFile(path)
	cut := ends[4*25+10] + 5 // inside the 12th tick of the fifth chunk
	trunc := filepath.Join(dir, "trunc.nrm2")
	if err := os.WriteFile(trunc, good[:cut], 0o644); err != nil {
		t.Fatal(err)
	}
	_, errs, code := runPost(t, dir, "-r", trunc, "-tprof", "-show")
	if code != 0 {
		t.Fatalf("post refused the truncated trace: %s", errs)
	}
	if n := totalTicks(t, dir); n != 4*25+11 {
		t.Fatalf("%d ticks kept, want %d (four whole chunks and 11 ticks of the cut one)", n, 4*25+11)
	}
	show, _ := os.ReadFile(filepath.Join(dir, "post.show"))
	for _, text := range []string{errs, string(show)} {
		if !strings.Contains(text, "cut inside the trace chunk of CPU 0") || !strings.Contains(text, fmt.Sprintf("byte offset %d", ends[4*25+10])) ||
			!strings.Contains(text, "no CPU statistics") {
			t.Fatalf("the cut is not reported:\n%s", text)
		}
	}
	_, errs, code = runPost(t, dir, "-strict", "-r", trunc)
	if code == 0 || strings.Count(strings.TrimSpace(errs), "\n") != 0 || !strings.Contains(errs, "truncated") || !strings.Contains(errs, "without -strict") {
		t.Fatalf("-strict: exit %d: %s", code, errs)
	}
}

// TestCorruptRecordLosesOnlyItsSegmentInReports: one corrupted tick in the
// third chunk loses that chunk's ticks from it on, and nothing else.
func TestCorruptRecordLosesOnlyItsSegmentInReports(t *testing.T) {
	dir := t.TempDir()
	path, starts, _ := chunked(t, dir)
	data, _ := os.ReadFile(path)
	bad := starts[2*25+7]
	binary.LittleEndian.PutUint16(data[bad:], trace.TypeLen(trace.LayoutFixed, 4))
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, errs, code := runPost(t, dir, "-r", path, "-tprof")
	if code != 0 {
		t.Fatalf("post: %s", errs)
	}
	if n := totalTicks(t, dir); n != 200-18 {
		t.Fatalf("%d ticks kept, want %d (the 18 from the bad one to its segment's end lost)", n, 200-18)
	}
	if !strings.Contains(errs, "a trace record of CPU 0 does not decode") || !strings.Contains(errs, fmt.Sprintf("byte offset %d", bad)) ||
		!strings.Contains(errs, "1 segment had a record that does not decode") {
		t.Fatalf("the damage is not reported: %s", errs)
	}
	_, errs, code = runPost(t, dir, "-strict", "-r", path)
	if code == 0 || strings.Count(strings.TrimSpace(errs), "\n") != 0 || !strings.Contains(errs, "does not decode") && !strings.Contains(errs, "shorter than") {
		t.Fatalf("-strict: exit %d: %s", code, errs)
	}
}

// TestHostileInputsFailFast: -r naming a FIFO, /dev/zero, a directory, a
// symbolic link to /dev/zero or a huge sparse non-trace file fails in one
// line within a second (a hang fails the test after 20 s).
func TestHostileInputsFailFast(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.nrm2")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.nrm2")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge.nrm2")
	if err := os.WriteFile(huge, []byte("PK\x03\x04 an archive"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 64<<30); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ path, msg string }{
		"fifo":      {fifo, "named pipe"},
		"dev-zero":  {"/dev/zero", "character device"},
		"directory": {dir, "directory"},
		"symlink":   {link, "character device"},
		"huge":      {huge, "not a perfinsp trace file"},
	} {
		type result struct {
			errs string
			code int
		}
		done := make(chan result, 1)
		start := time.Now()
		go func() {
			_, errs, code := runPost(t, dir, "-r", c.path)
			done <- result{errs, code}
		}()
		var r result
		select {
		case r = <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: post -r %s still running after 20 s", name, c.path)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("%s: took %v", name, took)
		}
		if r.code == 0 || strings.Count(strings.TrimSpace(r.errs), "\n") != 0 || !strings.Contains(r.errs, c.msg) {
			t.Fatalf("%s: exit %d, want one line naming %q: %q", name, r.code, c.msg, r.errs)
		}
	}
}

// TestRealTraceCutAndCorrupted traces the bundled example with the
// facility (daemon backend), then cuts the file at the start and in the
// middle of every third trace chunk, and corrupts one record in a trace chunk: post reports
// exactly the ticks whose records are whole before the cut, or all but the
// rest of the corrupted record's segment.
func TestRealTraceCutAndCorrupted(t *testing.T) {
	e := tracetest.Setup(t)
	e.Sw("init", "-t", "512K") // 32K segments: several chunks per CPU, room for a slow run
	e.Sw("enable", "tprof")
	e.Sw("setrate", "2000")
	e.Sw("on")
	e.RunBurn(100)
	// On a loaded machine the run can fill the buffers, which stops
	// tracing (normal mode): the trace is whole up to there, and cut
	// below like any other.
	if out, code := e.SwCode("off"); code != 0 && !strings.Contains(out, "not on") {
		t.Fatalf("swtrace off: exit %d: %s", code, out)
	}
	e.Sw("get", "real.nrm2")
	path := filepath.Join(e.Dir, "real.nrm2")
	f, err := nrm2.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Every tick's record span, and the TIME_HIGH records, from the intact file.
	type span struct{ start, end int64 }
	var ticks []span
	var highs []int64
	var rec trace.Record
	var traceChunks []nrm2.Chunk
	for _, c := range f.Chunks {
		r := trace.NewReader(c.Data, c.Offset, int(c.CPU), c.Kind == nrm2.ChunkMTE, 0)
		for {
			start := r.Offset()
			ok, err := r.NextInto(&rec)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			if rec.Major == trace.MajorTprof {
				ticks = append(ticks, span{start, r.Offset()})
			}
			if rec.Major == trace.MajorSys && rec.Minor == trace.SysTimeHigh {
				highs = append(highs, start)
			}
		}
		if c.Kind == nrm2.ChunkTrace {
			traceChunks = append(traceChunks, c)
		}
	}
	f.Close()
	if len(traceChunks) < 4 || len(ticks) < 1000 {
		t.Fatalf("the trace has %d trace chunks and %d ticks: too few to cut", len(traceChunks), len(ticks))
	}
	dir := t.TempDir()
	n := 0
	check := func(what string, b []byte, want int) {
		t.Helper()
		// A new file each time: post maps the file it reads, and
		// truncating a mapped file under a reader makes it fault.
		n++
		cutFile := filepath.Join(dir, fmt.Sprintf("cut%d.nrm2", n))
		if err := os.WriteFile(cutFile, b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, errs, code := runPost(t, dir, "-r", cutFile, "-tprof")
		if code != 0 {
			t.Fatalf("%s: post: %s", what, errs)
		}
		if n := totalTicks(t, dir); n != want {
			t.Fatalf("%s: %d ticks, want %d\n%s", what, n, want, errs)
		}
	}
	for i, c := range traceChunks {
		if i%3 != 1 {
			continue // every chunk is cut in the nrm2 tests; here a few of a real trace
		}
		for _, cut := range []int64{c.Offset - nrm2.ChunkHeaderSize, c.Offset + int64(len(c.Data))/2 + 1} {
			want := 0
			for _, tk := range ticks {
				if tk.end <= cut {
					want++
				}
			}
			check(fmt.Sprintf("cut at %d", cut), data[:cut], want)
		}
	}
	// Corrupt the first tick past the middle of a chunk: the ticks from it
	// to the next TIME_HIGH record (the end of its segment) are lost.
	c := traceChunks[len(traceChunks)/2]
	end := c.Offset + int64(len(c.Data))
	var bad span
	for _, tk := range ticks {
		if tk.start >= c.Offset+int64(len(c.Data))/2 && tk.end <= end {
			bad = tk
			break
		}
	}
	for _, h := range highs {
		if h > bad.start && h < end {
			end = h
			break
		}
	}
	lost := 0
	for _, tk := range ticks {
		if tk.start >= bad.start && tk.end <= end {
			lost++
		}
	}
	b := append([]byte(nil), data...)
	binary.LittleEndian.PutUint16(b[bad.start:], trace.TypeLen(trace.LayoutFixed, 4))
	check("corrupted record", b, len(ticks)-lost)
}
