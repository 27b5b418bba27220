package a2n

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"perfinsp/format/trace"
)

// jstkSample is one sample of a test's jprof-PID.jstk: frames < 0 is
// AsyncGetCallTrace's failure code.
type jstkSample struct {
	tid    uint32
	n      int32
	time   uint64
	frames []uint64
}

// jstkFile is a jprof-PID.jstk file as the agent writes it
// (tools/jprof/agent/jstacks.c).
func jstkFile(pid uint32, methods map[uint64]string, samples []jstkSample) []byte {
	le := binary.LittleEndian
	b := []byte("JPRFSTK1")
	b = le.AppendUint32(b, 1)
	b = le.AppendUint32(b, pid)
	b = le.AppendUint32(b, 1000)
	b = le.AppendUint32(b, 1)
	for id, name := range methods {
		n := (len(name) + 1 + 7) &^ 7
		b = le.AppendUint32(b, 1)
		b = le.AppendUint32(b, uint32(16+n))
		b = le.AppendUint64(b, id)
		b = append(b, name...)
		b = append(b, make([]byte, n-len(name))...)
	}
	for _, s := range samples {
		b = le.AppendUint32(b, 2)
		b = le.AppendUint32(b, uint32(24+8*len(s.frames)))
		b = le.AppendUint32(b, s.tid)
		b = le.AppendUint32(b, uint32(s.n))
		b = le.AppendUint64(b, s.time)
		for _, f := range s.frames {
			b = le.AppendUint64(b, f)
		}
	}
	return b
}

// A tick in the JVM's interpreter is named by the method the agent saw its
// thread run at the nearest sample the JVM could walk within JavaWindow;
// ticks of compiled code, of another thread, or with no walked sample
// within the window keep their names.
func TestJavaTick(t *testing.T) {
	dir := t.TempDir()
	const pid, tid = 55, 56
	file := jstkFile(pid, map[uint64]string{0x10: "Hot.spin", 0x20: "Hot.main"}, []jstkSample{
		{tid, 2, 1_000_000_000, []uint64{0x10, 0x20}},
		{tid, 1, 1_050_000_000, []uint64{0x20}},
		{tid, -2, 1_300_000_000, nil},
		{tid, 1, 2_000_000_000, []uint64{0x20}},
		{tid, -5, 2_001_000_000, nil},
		{tid + 1, 1, 1_000_000_000, []uint64{0x20}},
	})
	if err := os.WriteFile(filepath.Join(dir, "jprof-55.jstk"), file, 0o644); err != nil {
		t.Fatal(err)
	}
	r := New(nil)
	r.PerfMapDir = dir
	if !r.HasJavaStacks(time.Now().Add(-time.Minute)) {
		t.Fatal("HasJavaStacks: false with a jprof-55.jstk in the perf-map directory")
	}
	// a file last written before the trace began is of a JVM that ended
	if r.HasJavaStacks(time.Now().Add(time.Minute)) {
		t.Fatal("HasJavaStacks: true for a jprof-55.jstk written before the trace began")
	}
	const interp, compiled = 0x7f0000001000, 0x7f0000100000
	r.Apply(&trace.Record{Major: trace.MajorJITLoad, Minor: trace.JITLoad, Fixed: []uint64{pid, tid, interp, 0x1000}, Str: "Interpreter"})
	r.Apply(&trace.Record{Major: trace.MajorJITLoad, Minor: trace.JITLoad, Fixed: []uint64{pid, tid, compiled, 0x100}, Str: "Hot.compiled"})
	for _, c := range []struct {
		what     string
		tid      uint32
		time, ip uint64
		mod, sym string
	}{
		{"just after a sample", tid, 1_005_000_000, interp + 0x40, "Interpreter", "Hot.spin"},
		{"just before a sample", tid, 995_000_000, interp + 0x80, "Interpreter", "Hot.spin"},
		{"nearer the second sample", tid, 1_040_000_000, interp, "Interpreter", "Hot.main"},
		{"another thread's sample", tid + 1, 1_001_000_000, interp, "Interpreter", "Hot.main"},
		{"compiled code", tid, 1_000_000_000, compiled + 8, "JIT", "Hot.compiled"},
		{"an unwalkable sample nearest, no walked one within the window", tid, 1_299_000_000, interp, "JIT", "Interpreter"},
		{"no sample within the window", tid, 1_600_000_000, interp, "JIT", "Interpreter"},
		{"an unwalkable sample nearest, a walked one within the window", tid, 2_001_500_000, interp, "Interpreter", "Hot.main"},
		{"a thread never sampled", tid + 9, 1_000_000_000, interp, "JIT", "Interpreter"},
	} {
		res := r.Resolve(pid, r.JavaTick(pid, c.tid, c.time, c.ip), false)
		if res.Module != c.mod || res.Symbol != c.sym {
			t.Errorf("%s: %s / %s, want %s / %s", c.what, res.Module, res.Symbol, c.mod, c.sym)
		}
	}
	// one address per method, whatever the tick's offset in the interpreter
	if a, b := r.JavaTick(pid, tid, 1_000_000_000, interp), r.JavaTick(pid, tid, 1_001_000_000, interp+0x800); a != b {
		t.Errorf("two ticks of Hot.spin at %#x and %#x", a, b)
	}
	// a process with no file, or whose file is another pid's
	if err := os.WriteFile(filepath.Join(dir, "jprof-77.jstk"), file, 0o644); err != nil {
		t.Fatal(err)
	}
	r.Apply(&trace.Record{Major: trace.MajorJITLoad, Minor: trace.JITLoad, Fixed: []uint64{77, 77, interp, 0x1000}, Str: "Interpreter"})
	if ip := r.JavaTick(77, tid, 1_000_000_000, interp); ip != interp {
		t.Errorf("pid 77 took pid 55's samples: %#x", ip)
	}
	if p := strings.Join(r.Cache.Problems(), "\n"); !strings.Contains(p, "another process (pid 55)") {
		t.Errorf("no note of the file of another pid: %q", p)
	}
}

// A file cut anywhere keeps the records before the cut.
func TestParseJavaStacksCut(t *testing.T) {
	file := jstkFile(5, map[uint64]string{1: "A.a"}, []jstkSample{{6, 1, 10, []uint64{1}}, {6, 1, 20, []uint64{1}}})
	j, err := ParseJavaStacks(file)
	if err != nil || len(j.Samples(6)) != 2 || j.Methods[1] != "A.a" {
		t.Fatalf("whole file: %v %+v", err, j)
	}
	j, err = ParseJavaStacks(file[:len(file)-4])
	if err == nil || len(j.Samples(6)) != 1 {
		t.Errorf("cut in the last sample: %v, %d samples, want an error and 1", err, len(j.Samples(6)))
	}
	if _, err := ParseJavaStacks([]byte("JPRFSTK2" + strings.Repeat("\x00", 16))); err == nil {
		t.Error("another magic read")
	}
}

func FuzzParseJavaStacks(f *testing.F) {
	f.Add(jstkFile(5, map[uint64]string{1: "A.a", 2: "B.b"}, []jstkSample{{6, 2, 10, []uint64{1, 2}}, {6, -3, 20, nil}}))
	f.Add([]byte("JPRFSTK1\x01\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		j, _ := ParseJavaStacks(b)
		if j == nil {
			return
		}
		for tid, ss := range j.byTID {
			for i, s := range ss {
				if s.TID != tid || i > 0 && s.Time < ss[i-1].Time {
					t.Fatalf("thread %d's samples out of order or misfiled", tid)
				}
				j.Nearest(tid, s.Time)
			}
		}
	})
}

// JavaStack names a tick's Java frames by the nearest sample that fits
// its native stack: an Interpreter frame per interpreted method, a
// compiled frame per method after those inlined into it, native frames
// and stubs in place; a shallower stack of interpreted frames by the
// nearest deeper sample's outer frames; else the outer frames the
// samples on both sides share; nothing from a sample far outside the
// thread's run of samples (a JVM starting before the sampler).
func TestJavaStack(t *testing.T) {
	dir := t.TempDir()
	const pid, tid = 55, 56
	methods := map[uint64]string{1: "A.main", 2: "A.outer", 3: "A.mid", 4: "A.leaf", 5: "A.inl", 6: "A.comp", 7: "A.other"}
	file := jstkFile(pid, methods, []jstkSample{
		// main -> outer -> mid -> leaf (interpreted)
		{tid, 4, 1_000_000_000, []uint64{4, 3, 2, 1}},
		// main -> comp (compiled, A.inl inlined into it) -> leaf
		{tid, 4, 2_000_000_000, []uint64{4, 5, 6, 1}},
		// two samples sharing main -> outer around 3 s
		{tid, 3, 2_990_000_000, []uint64{7, 2, 1}},
		{tid, 4, 3_010_000_000, []uint64{4, 3, 2, 1}},
	})
	if err := os.WriteFile(filepath.Join(dir, "jprof-55.jstk"), file, 0o644); err != nil {
		t.Fatal(err)
	}
	r := New(nil)
	r.PerfMapDir = dir
	const interp, stub, comp, native = 0x7f0000001000, 0x7f0000200000, 0x7f0000100000, 0x400100
	for _, j := range []struct {
		addr, size uint64
		name       string
	}{{interp, 0x1000, "Interpreter"}, {stub, 0x100, "call_stub"}, {comp, 0x100, "A.comp"}} {
		r.Apply(&trace.Record{Major: trace.MajorJITLoad, Minor: trace.JITLoad, Fixed: []uint64{pid, tid, j.addr, j.size}, Str: j.name})
	}
	names := func(pcs []uint64) string {
		var out []string
		for i, pc := range pcs {
			if i > 0 {
				pc-- // as the stacks locate a return address
			}
			out = append(out, r.Resolve(pid, pc, false).Symbol)
		}
		return strings.Join(out, ";")
	}
	ret := func(a uint64) uint64 { return a + 5 } // a return address in the code at a
	for _, c := range []struct {
		what string
		time uint64
		user []uint64
		want string
	}{
		{"interpreted, a native leaf", 1_001_000_000,
			[]uint64{native, ret(interp), ret(interp + 0x10), ret(interp + 0x20), ret(interp + 0x30), ret(stub)},
			"<unknown>;A.leaf;A.mid;A.outer;A.main;call_stub"},
		{"compiled with an inlined method", 2_001_000_000,
			[]uint64{interp + 0x40, ret(comp), ret(interp), ret(stub)},
			"A.leaf;A.inl;A.comp;A.main;call_stub"},
		{"shallower than the samples", 1_002_000_000,
			[]uint64{interp + 0x40, ret(interp), ret(interp), ret(stub)},
			"A.mid;A.outer;A.main;call_stub"},
		{"no sample fits: the frames both sides share", 3_000_000_000,
			[]uint64{interp, ret(interp), ret(interp), ret(interp), ret(interp), ret(stub)},
			"Interpreter;Interpreter;Interpreter;A.outer;A.main;call_stub"},
		{"long before the first sample", 900_000_000,
			[]uint64{interp, ret(interp), ret(interp), ret(interp), ret(stub)},
			"Interpreter;Interpreter;Interpreter;Interpreter;call_stub"},
	} {
		got := names(r.JavaStack(pid, tid, c.time, c.user))
		if got != c.want {
			t.Errorf("%s: %s, want %s", c.what, got, c.want)
		}
	}
}

// nativeRecords are the records marking ids as native methods.
func nativeRecords(ids ...uint64) []byte {
	le := binary.LittleEndian
	var b []byte
	for _, id := range ids {
		b = le.AppendUint32(b, 3)
		b = le.AppendUint32(b, 16)
		b = le.AppendUint64(b, id)
	}
	return b
}

// A Java frame the JVM called from C (the call stub as its caller, Java
// frames further out) takes only a sample frame the JVM calls that way (a
// class initializer, loadClass) or one a native method called (reflection,
// JNI); a class initializer only such a frame. A sample of another moment
// with as many frames does not name a class initializer's frames by the
// methods of the code that triggered it.
func TestJavaStackCalledFromC(t *testing.T) {
	const pid, tid = 57, 58
	methods := map[uint64]string{1: "A.main", 2: "A.outer", 3: "A.mid", 4: "A.leaf", 5: "B.<clinit>",
		6: "A.invoke0", 7: "A.target", 8: "A.comp"}
	const interp, stub, comp, jvm = 0x7f0000001000, 0x7f0000200000, 0x7f0000100000, 0x400100
	ret := func(a uint64) uint64 { return a + 5 }
	// leaf first: a Java frame, the call stub, the JVM's C code, then
	// three Java frames and the thread's call stub
	viaC := []uint64{interp + 0x40, ret(stub), ret(jvm), ret(interp), ret(interp), ret(interp), ret(stub)}
	for _, c := range []struct {
		what    string
		sample  []uint64
		native  []uint64
		user    []uint64
		want    string
		compile bool
	}{
		{"a plain call's sample does not fit a call from C", []uint64{4, 3, 2, 1}, nil, viaC,
			"Interpreter;call_stub;<unknown>;Interpreter;Interpreter;Interpreter;call_stub", false},
		{"a class initializer fits it", []uint64{5, 3, 2, 1}, nil, viaC,
			"B.<clinit>;call_stub;<unknown>;A.mid;A.outer;A.main;call_stub", false},
		{"a method a native method called fits it", []uint64{7, 6, 2, 1}, []uint64{6}, viaC,
			"A.target;call_stub;<unknown>;A.invoke0;A.outer;A.main;call_stub", false},
		{"the same sample without the native mark does not", []uint64{7, 6, 2, 1}, nil, viaC,
			"Interpreter;call_stub;<unknown>;Interpreter;Interpreter;Interpreter;call_stub", false},
		{"a class initializer does not fit a plain call", []uint64{5, 3, 2, 1}, nil,
			[]uint64{interp + 0x40, ret(interp), ret(interp), ret(interp), ret(stub)},
			"Interpreter;Interpreter;Interpreter;Interpreter;call_stub", false},
		{"nor inlined into compiled code", []uint64{5, 8, 1}, nil,
			[]uint64{comp + 0x10, ret(interp), ret(stub)},
			"A.comp;Interpreter;call_stub", true},
		{"a compiled class initializer called from C fits", []uint64{4, 5, 2, 1}, nil,
			[]uint64{interp + 0x40, ret(comp), ret(stub), ret(jvm), ret(interp), ret(interp), ret(stub)},
			"A.leaf;B.<clinit>;call_stub;<unknown>;A.outer;A.main;call_stub", true},
	} {
		dir := t.TempDir()
		file := jstkFile(pid, methods, []jstkSample{{tid, int32(len(c.sample)), 1_000_000_000, c.sample}})
		file = append(file, nativeRecords(c.native...)...)
		if err := os.WriteFile(filepath.Join(dir, "jprof-57.jstk"), file, 0o644); err != nil {
			t.Fatal(err)
		}
		r := New(nil)
		r.PerfMapDir = dir
		code := []struct {
			addr, size uint64
			name       string
		}{{interp, 0x1000, "Interpreter"}, {stub, 0x100, "call_stub"}}
		if c.compile {
			name := "A.comp"
			if c.sample[1] == 5 {
				name = "B.<clinit>"
			}
			code = append(code, struct {
				addr, size uint64
				name       string
			}{comp, 0x100, name})
		}
		for _, j := range code {
			r.Apply(&trace.Record{Major: trace.MajorJITLoad, Minor: trace.JITLoad, Fixed: []uint64{pid, tid, j.addr, j.size}, Str: j.name})
		}
		var got []string
		for i, pc := range r.JavaStack(pid, tid, 1_000_500_000, c.user) {
			if i > 0 {
				pc--
			}
			got = append(got, r.Resolve(pid, pc, false).Symbol)
		}
		if s := strings.Join(got, ";"); s != c.want {
			t.Errorf("%s: %s, want %s", c.what, s, c.want)
		}
	}
}
