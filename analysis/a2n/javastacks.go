package a2n

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// MaxJavaStacksSize bounds a jprof-PID.jstk file read (untrusted, as perf maps).
var MaxJavaStacksSize int64 = 1 << 30

// JavaSample is one Java stack the JProf agent sampled (tprof mode,
// docs/jprof.md): the thread, the time (the trace's clock) and the method
// ids, the running frame first; none when the JVM could not walk it.
type JavaSample struct {
	TID    uint32
	Time   uint64
	Frames []uint64
}

// JavaStacks is a jprof-PID.jstk file: the agent's samples of one JVM,
// each thread's in time order, and the names of their method ids.
type JavaStacks struct {
	PID     uint32
	Rate    uint32 // the sampling rate the agent asked for (Hz)
	Methods map[uint64]string
	native  map[uint64]bool // the native methods among Methods
	byTID   map[uint32][]JavaSample
	names   map[string]bool // javaNames
}

// Threads is the threads that have samples, in increasing order.
func (j *JavaStacks) Threads() []uint32 {
	out := make([]uint32, 0, len(j.byTID))
	for tid := range j.byTID {
		out = append(out, tid)
	}
	sort.Slice(out, func(a, b int) bool { return out[a] < out[b] })
	return out
}

// Samples is tid's samples in time order.
func (j *JavaStacks) Samples(tid uint32) []JavaSample { return j.byTID[tid] }

// JavaWindow is how far (ns) from a tick the sample naming it may be. The
// agent's timers run on each thread's CPU clock, so a thread's samples are
// a sampling period of its CPU time apart whatever the wall-clock gap: a
// wider gap is time the thread spent off CPU, when its Java state did not
// change. The window only keeps a thread the sampler missed (no timer, a
// run of walks that failed) from taking a sample from far away.
const JavaWindow = 100_000_000

// Nearest is the method the thread was running at the sample of tid
// nearest to t, within JavaWindow, among those the JVM could walk (ok
// false: none).
func (j *JavaStacks) Nearest(tid uint32, t uint64) (name string, ok bool) {
	s := j.byTID[tid]
	i := sort.Search(len(s), func(i int) bool { return s[i].Time >= t })
	var before, after *JavaSample // the nearest walked sample on each side
	for k := i - 1; k >= 0 && t-s[k].Time <= JavaWindow; k-- {
		if len(s[k].Frames) > 0 {
			before = &s[k]
			break
		}
	}
	for k := i; k < len(s) && s[k].Time-t <= JavaWindow; k++ {
		if len(s[k].Frames) > 0 {
			after = &s[k]
			break
		}
	}
	best := before
	if after != nil && (best == nil || after.Time-t < t-best.Time) {
		best = after
	}
	if best == nil {
		return "", false
	}
	name, ok = j.Methods[best.Frames[0]]
	return name, ok
}

var errJavaStacks = errors.New("not a jprof Java stacks file")

// ParseJavaStacks reads a jprof-PID.jstk file (the format is in
// tools/jprof/agent/jstacks.c). Malformed input ends the parse with an
// error; what was read before is kept.
func ParseJavaStacks(b []byte) (*JavaStacks, error) {
	if len(b) < 24 || !bytes.Equal(b[:8], []byte("JPRFSTK1")) {
		return nil, errJavaStacks
	}
	le := binary.LittleEndian
	if le.Uint32(b[8:]) != 1 {
		return nil, errors.New("jprof Java stacks: version " + strconv.Itoa(int(le.Uint32(b[8:]))) + ", this post reads 1")
	}
	j := &JavaStacks{PID: le.Uint32(b[12:]), Rate: le.Uint32(b[16:]), Methods: map[uint64]string{}, native: map[uint64]bool{}, byTID: map[uint32][]JavaSample{}}
	var err error
	for off := 24; off < len(b); {
		if off+8 > len(b) {
			err = errors.New("jprof Java stacks: a record cut short")
			break
		}
		typ, size := le.Uint32(b[off:]), int(le.Uint32(b[off+4:]))
		if size < 16 || size%8 != 0 || size > len(b)-off {
			err = errors.New("jprof Java stacks: a record of a bad size")
			break
		}
		rec := b[off : off+size]
		switch typ {
		case 1:
			name := rec[16:]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			j.Methods[le.Uint64(rec[8:])] = string(name)
		case 2:
			if size < 24 {
				err = errors.New("jprof Java stacks: a sample cut short")
				break
			}
			s := JavaSample{TID: le.Uint32(rec[8:]), Time: le.Uint64(rec[16:])}
			if n := int(int32(le.Uint32(rec[12:]))); n > 0 {
				n = min(n, (size-24)/8)
				s.Frames = make([]uint64, n)
				for k := range s.Frames {
					s.Frames[k] = le.Uint64(rec[24+8*k:])
				}
			}
			j.byTID[s.TID] = append(j.byTID[s.TID], s)
		case 3:
			j.native[le.Uint64(rec[8:])] = true
		}
		if err != nil {
			break
		}
		off += size
	}
	for _, s := range j.byTID {
		sort.SliceStable(s, func(a, b int) bool { return s[a].Time < s[b].Time })
	}
	return j, err
}

// javaStacks is pid's jprof-PID.jstk in PerfMapDir, read once (nil: none).
func (r *Resolver) javaStacks(p *Process) *JavaStacks {
	if p.javaRead {
		return p.java
	}
	p.javaRead = true
	dir := r.perfMapDir()
	name := "jprof-" + strconv.Itoa(int(p.PID)) + ".jstk"
	if !r.perfMaps.mayHold(dir, name) {
		return nil
	}
	b, err := readChecked(filepath.Join(dir, name), MaxJavaStacksSize, true)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			r.Cache.note(err.Error())
		}
		return nil
	}
	j, err := ParseJavaStacks(b)
	if err != nil {
		r.Cache.note(filepath.Join(dir, name) + ": " + err.Error())
	}
	if j != nil && j.PID != p.PID {
		r.Cache.note(filepath.Join(dir, name) + ": the samples of another process (pid " + strconv.Itoa(int(j.PID)) + ")")
		return nil
	}
	p.java = j
	return j
}

// HasJavaStacks reports whether PerfMapDir holds a jprof-PID.jstk file
// last written at or after since, the trace's start (a report whose ticks
// JavaTick may rename is counted in trace order). A file the agent last
// wrote before the trace began is of a JVM that had ended by then: it
// names nothing in this trace and leaves the report's counting alone.
func (r *Resolver) HasJavaStacks(since time.Time) bool {
	m, _ := filepath.Glob(filepath.Join(r.perfMapDir(), "jprof-*.jstk"))
	for _, name := range m {
		if fi, err := os.Stat(name); err == nil && !fi.ModTime().Before(since) {
			return true
		}
	}
	return false
}

// interpreterName is the JVM's interpreter in its JIT_LOAD records.
const interpreterName = "Interpreter"

// javaBase is where the addresses JavaTick gives start: non-canonical on
// x86-64 and arm64 (no code is ever there).
const javaBase = 0x4a50_0000_0000_0000

// JavaTick is the address a user-mode tick of tid at time t at ip counts
// at: when ip is in pid's interpreter (its JIT_LOAD record) and the
// agent's Java stacks name the method the thread ran then (Nearest), an
// address of its own for that method, which Locate names module
// "Interpreter", symbol the method; else ip. As Locate it reads and
// changes pid's state: called in trace order, as Apply.
func (r *Resolver) JavaTick(pid, tid uint32, t, ip uint64) uint64 {
	p := r.procs[pid]
	if p == nil || len(p.jit) == 0 {
		return ip
	}
	i := sort.Search(len(p.jit), func(i int) bool { return p.jit[i].Addr > ip }) - 1
	if i < 0 || ip >= p.jit[i].Addr+p.jit[i].Size || p.jit[i].Name != interpreterName {
		return ip
	}
	j := r.javaStacks(p)
	if j == nil {
		return ip
	}
	name, ok := j.Nearest(tid, t)
	if !ok {
		return ip
	}
	if p.javaAddr == nil {
		p.javaAddr = map[string]uint64{}
	}
	a, ok := p.javaAddr[name]
	if !ok {
		a = javaBase + 16*uint64(len(p.javaAddr))
		p.javaAddr[name] = a
		k := sort.Search(len(p.jit), func(k int) bool { return p.jit[k].Addr > a })
		p.jit = append(p.jit, jitSym{})
		copy(p.jit[k+1:], p.jit[k:])
		p.jit[k] = jitSym{Addr: a, Size: 16, Name: name, Module: interpreterName}
	}
	return a
}

// javaFitMax is the bytes of a name a trace record holds (the pitrace
// module's PITRACE_JIT_NAME_MAX): the agent writes a longer one as its
// beginning, '#' and the FNV-1a hash of the whole name (jittrace.c).
const javaFitMax = 480

// traceName is name as the agent writes it into a trace record.
func traceName(name string) string {
	if len(name) <= javaFitMax {
		return name
	}
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * 0x100000001b3
	}
	keep := javaFitMax - 17
	for keep > 0 && name[keep]&0xC0 == 0x80 {
		keep--
	}
	return fmt.Sprintf("%s#%016x", name[:keep], h)
}

// javaNames is the set of the methods' names as JIT_LOAD records give them.
func (j *JavaStacks) javaNames() map[string]bool {
	if j.names == nil {
		j.names = make(map[string]bool, len(j.Methods))
		for _, n := range j.Methods {
			j.names[traceName(n)] = true
		}
	}
	return j.names
}

// javaEdge is how far (ns) from a tick outside the run of a thread's
// samples (before its first, after its last: the JVM starting before the
// sampler, a thread ending) a sample naming it may be.
const javaEdge = 5_000_000

// candidates is up to n of tid's walked samples within JavaWindow of t
// (javaEdge outside the run of its samples), nearest first.
func (j *JavaStacks) candidates(tid uint32, t uint64, n int) []*JavaSample {
	s := j.byTID[tid]
	i := sort.Search(len(s), func(i int) bool { return s[i].Time >= t })
	win := uint64(JavaWindow)
	if i == 0 || i == len(s) {
		win = javaEdge
	}
	var out []*JavaSample
	b, a := i-1, i
	for len(out) < n {
		for b >= 0 && len(s[b].Frames) == 0 && t-s[b].Time <= win {
			b--
		}
		for a < len(s) && len(s[a].Frames) == 0 && s[a].Time-t <= win {
			a++
		}
		okB := b >= 0 && t-s[b].Time <= win
		okA := a < len(s) && s[a].Time-t <= win
		switch {
		case okB && (!okA || t-s[b].Time <= s[a].Time-t):
			out = append(out, &s[b])
			b--
		case okA:
			out = append(out, &s[a])
			a++
		default:
			return out
		}
	}
	return out
}

// javaCandidates is how many of the nearest samples JavaStack tries.
const javaCandidates = 16

// javaFrameAddr is an address of its own for a Java frame named name in
// module mod ("Interpreter": a method the interpreter ran; "JIT": one
// inlined into compiled code; "Java": a frame the stack walk lost),
// which Locate names mod, name. As a return address (one less) it still
// falls in the frame's range.
func (p *Process) javaFrameAddr(mod, name string) uint64 {
	key := name
	if mod != interpreterName {
		key = mod + "\x00" + name // (JavaTick's keys are the interpreter's)
	}
	if p.javaAddr == nil {
		p.javaAddr = map[string]uint64{}
	}
	a, ok := p.javaAddr[key]
	if !ok {
		a = javaBase + 16*uint64(len(p.javaAddr))
		p.javaAddr[key] = a
		k := sort.Search(len(p.jit), func(k int) bool { return p.jit[k].Addr > a })
		p.jit = append(p.jit, jitSym{})
		copy(p.jit[k+1:], p.jit[k:])
		p.jit[k] = jitSym{Addr: a, Size: 16, Name: name, Module: mod}
	}
	return a + 8
}

// codeAt is the JIT record holding addr (the JVM's code: the interpreter,
// stubs, compiled methods), or nil.
func (p *Process) codeAt(addr uint64) *jitSym {
	if addr >= javaBase {
		return nil
	}
	i := sort.Search(len(p.jit), func(i int) bool { return p.jit[i].Addr > addr }) - 1
	if i < 0 || addr >= p.jit[i].Addr+p.jit[i].Size {
		return nil
	}
	return &p.jit[i]
}

// JavaStack is a tick's user stack (PCs, the leaf first) with its Java
// frames named: the frames in the JVM's code — one per interpreted
// method ("Interpreter"), one per compiled method with the methods
// inlined into it — take the Java frames of a sample of the JProf agent
// (jprof-PID.jstk) that fits them: among tid's samples nearest to t
// (within JavaWindow), the first whose frames, leaf first, give each
// interpreter frame one method and each compiled frame its own method
// after the frames inlined into it, with none left over (or, after a
// compiled frame whose caller a frame-pointer walk cannot find, the rest
// as the outer frames). Native frames (a system call's libc, a JNI
// library, the JVM's own) stay where they are, stubs too. A stack no
// sample fits is returned as it is (a tick before the thread's first
// sample or after its last is named only by one within javaEdge). A stack of interpreted frames that
// none fits takes the outer frames of the nearest sample deeper than it.
// Else the outer frames the samples before and after the tick share
// (held) name its outer Interpreter frames (rootFit).
// The agent samples on its own timer: the sample is the thread's Java
// state nearest to the tick that fits its native stack, not at it.
// As Locate it reads and changes pid's state: called in trace order.
func (r *Resolver) JavaStack(pid, tid uint32, t uint64, user []uint64) []uint64 {
	p := r.procs[pid]
	if p == nil || len(p.jit) == 0 || len(user) == 0 {
		return user
	}
	code := make([]*jitSym, len(user))
	first, last := -1, -1
	for i, pc := range user {
		if i > 0 {
			pc-- // a return address: the call
		}
		if code[i] = p.codeAt(pc); code[i] != nil {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return user
	}
	j := r.javaStacks(p)
	if j == nil {
		return user
	}
	cands := j.candidates(tid, t, javaCandidates)
	for _, s := range cands {
		if out, ok := p.fitJava(j, user, code, first, last, s.Frames); ok {
			return out
		}
	}
	// A stack of interpreted frames only that is shallower than the
	// samples (the thread had returned from what they caught it in): the
	// outer frames of the nearest sample that has as many.
	interp, compiled := 0, false
	for _, c := range code[first : last+1] {
		if c != nil && c.Name != interpreterName && j.javaNames()[c.Name] {
			compiled = true
		}
		if c != nil && c.Name == interpreterName {
			interp++
		}
	}
	for _, s := range cands {
		if !compiled && len(s.Frames) > interp {
			if out, ok := p.fitJava(j, user, code, first, last, s.Frames[len(s.Frames)-interp:]); ok {
				return out
			}
		}
	}
	return p.rootFit(j, user, code, first, last, j.held(tid, t))
}

// held is the outer frames (root first) that tid's walked samples on
// either side of t (the nearest before and after, within JavaWindow)
// share: the frames the thread was in at both, and so at t.
func (j *JavaStacks) held(tid uint32, t uint64) []uint64 {
	s := j.byTID[tid]
	i := sort.Search(len(s), func(i int) bool { return s[i].Time >= t })
	b, a := i-1, i
	for b >= 0 && len(s[b].Frames) == 0 && t-s[b].Time <= JavaWindow {
		b--
	}
	for a < len(s) && len(s[a].Frames) == 0 && s[a].Time-t <= JavaWindow {
		a++
	}
	if b < 0 || a >= len(s) || t-s[b].Time > JavaWindow || s[a].Time-t > JavaWindow {
		return nil
	}
	x, y := s[b].Frames, s[a].Frames
	var out []uint64
	for k := 1; k <= len(x) && k <= len(y) && x[len(x)-k] == y[len(y)-k]; k++ {
		out = append(out, x[len(x)-k])
	}
	return out
}

// rootFit names a stack's outer Java frames by held, the frames the
// thread kept from the sample before the tick to the one after (root
// first): from the root, each Interpreter frame the next of them, a
// compiled frame of the next one's method passed (what follows may be
// inlined into it: naming stops there), and at a compiled frame of
// another method naming stops too. The inner frames keep their names
// (Interpreter).
func (p *Process) rootFit(j *JavaStacks, user []uint64, code []*jitSym, first, last int, held []uint64) []uint64 {
	if len(held) == 0 {
		return user
	}
	names := j.javaNames()
	out := append([]uint64(nil), user...)
	k := 0
	for i := last; i >= first && k < len(held); i-- {
		c := code[i]
		switch {
		case c == nil: // native code between two runs of Java frames
		case c.Name == interpreterName:
			name, ok := j.Methods[held[k]]
			if !ok {
				return out
			}
			out[i] = p.javaFrameAddr(interpreterName, name)
			k++
		case names[c.Name]:
			return out
		}
	}
	return out
}

// callStub is the JVM's stub through which C code (the JVM's own, a JNI
// library) calls a Java method.
const callStub = "call_stub"

// calledFromC is whether the Java frame at user[i] was called from C: the
// next outer frame is the JVM's call stub and a Java frame lies further
// out (the outermost Java frame, a thread's root, is not asked about).
func calledFromC(code []*jitSym, i, last int) bool {
	return i < last && code[i+1] != nil && strings.Contains(code[i+1].Name, callStub)
}

// calledByJVM is whether the JVM itself calls the method name from its C
// code in the middle of a thread's Java stack: a class initializer (run
// where a class is first used), a class loader's loadClass (a class
// resolved), the method-handle linkage of invokedynamic and constant
// call sites.
func calledByJVM(name string) bool {
	return strings.HasSuffix(name, ".<clinit>") || strings.HasSuffix(name, ".loadClass") ||
		strings.HasPrefix(name, "java.lang.invoke.MethodHandleNatives.")
}

// callFits is whether a sample's frame frames[k] may stand for a Java
// frame of the tick's stack that was (fromC) or was not called from C. A
// frame called from C with a caller in the sample must be one the JVM
// calls (calledByJVM) or called by a native method (reflection, a JNI
// upcall); a class initializer must be called from C. Otherwise a sample
// of another moment with as many frames would name a class initializer's
// frames by the methods of the code that triggered it.
func (j *JavaStacks) callFits(frames []uint64, k int, fromC bool) bool {
	if k+1 >= len(frames) {
		return true // the sample's root: its caller is not known
	}
	name := j.Methods[frames[k]]
	if !fromC {
		return !strings.HasSuffix(name, ".<clinit>")
	}
	return calledByJVM(name) || j.native[frames[k+1]]
}

// fitJava is JavaStack with one sample's frames (see there).
func (p *Process) fitJava(j *JavaStacks, user []uint64, code []*jitSym, first, last int, frames []uint64) ([]uint64, bool) {
	names := j.javaNames()
	name := func(id uint64) string {
		if n, ok := j.Methods[id]; ok {
			return n
		}
		return "method@" + strconv.FormatUint(id, 16)
	}
	out := make([]uint64, 0, len(user)+len(frames))
	out = append(out, user[:first]...)
	k, lastCompiled := 0, false
	for i := first; i <= last; i++ {
		c := code[i]
		switch {
		case c == nil: // native code between two runs of Java frames (JNI)
			out = append(out, user[i])
		case c.Name == interpreterName:
			if k >= len(frames) || !j.callFits(frames, k, calledFromC(code, i, last)) {
				return nil, false
			}
			out = append(out, p.javaFrameAddr(interpreterName, name(frames[k])))
			k++
			lastCompiled = false
		case names[c.Name]: // a compiled method: the frames inlined into it, then its own
			m := k
			for m < len(frames) && traceName(name(frames[m])) != c.Name {
				m++
			}
			if m == len(frames) || !j.callFits(frames, m, calledFromC(code, i, last)) {
				return nil, false
			}
			for ; k < m; k++ {
				if strings.HasSuffix(name(frames[k]), ".<clinit>") {
					return nil, false // a class initializer is never inlined
				}
				out = append(out, p.javaFrameAddr("JIT", name(frames[k])))
			}
			out = append(out, user[i])
			k++
			lastCompiled = true
		default: // a stub
			out = append(out, user[i])
		}
	}
	if k < len(frames) {
		if !lastCompiled {
			return nil, false
		}
		// the walk went astray past compiled code (no frame pointer):
		// the sample's outer frames replace what it found
		for ; k < len(frames); k++ {
			out = append(out, p.javaFrameAddr("Java", name(frames[k])))
		}
		return out, true
	}
	return append(out, user[last+1:]...), true
}
