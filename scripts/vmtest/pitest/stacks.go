package main

// pitest stacks: call stacks at every tprof tick through the module
// (swtrace enable callstack [--depth N]): the bundled example's exact call
// paths in post --folded with ticks in the ratio it is built with, a stack
// deeper than the limit cut at the limit and marked truncated, and kernel
// frames (first, then the user frames) for a loop of system calls.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	"perfinsp/libperfutil/control"
)

const (
	stackPost = "/bin/post"
	stackBurn = "/bin/cpuburn"
	stackProg = "/bin/stackprog"
)

// stackRun traces cmd with tprof and call stacks at depth (0: leave the
// limit as it is) into file and returns the command's pid.
func stackRun(file string, depth int, traceSize int, cmd ...string) (int, error) {
	f, err := control.Open("kmod")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	_ = f.Free()
	if err := f.SetMode(control.ModeNormal, ""); err != nil {
		return 0, err
	}
	if err := f.Init(control.Config{TraceBufSize: traceSize, MTEBufSize: 512 << 10}); err != nil {
		return 0, err
	}
	st, err := f.Info()
	if err != nil {
		return 0, err
	}
	if err := f.Disable(st.Enabled); err != nil {
		return 0, err
	}
	if err := f.Enable([]uint16{trace.MajorTprof, trace.MajorUnwind}); err != nil {
		return 0, err
	}
	if depth > 0 {
		sd, ok := f.(control.StackDepth)
		if !ok {
			return 0, errors.New("the kmod backend has no stack depth")
		}
		if err := sd.SetStackDepth(depth); err != nil {
			return 0, err
		}
	}
	if err := f.SetRate(1000, ""); err != nil {
		return 0, err
	}
	if err := f.On(); err != nil {
		return 0, err
	}
	c := exec.Command(cmd[0], cmd[1:]...)
	out, err := os.Create(file + ".out")
	if err != nil {
		_ = f.Off()
		return 0, err
	}
	defer out.Close()
	c.Stdout, c.Stderr = out, out
	err = c.Run()
	if offErr := f.Off(); err == nil {
		err = offErr
	}
	if err != nil {
		return 0, fmt.Errorf("%v: %w", cmd, err)
	}
	return c.Process.Pid, f.Get(file)
}

// stackRec is one UNWIND record of the traced process.
type stackRec struct {
	pcs       []uint64
	kernel    int
	truncated bool
}

// stackRecords reads file's UNWIND records of pid and checks that every
// UNWIND record of the file follows a tprof tick of the same thread on the
// same CPU (the pairing post relies on). ticks: pid's tprof ticks.
func stackRecords(file string, pid int) (recs []stackRec, ticks int, err error) {
	f, err := nrm2.Open(file)
	if err != nil {
		return nil, 0, err
	}
	type last struct {
		tick     bool
		pid, tid uint64
	}
	prev := map[int]last{}
	unwinds := 0
	err = f.Records(func(r *trace.Record) error {
		if r.MTE || r.Major == trace.MajorSys && r.Minor == trace.SysTimeHigh {
			return nil
		}
		p := prev[r.CPU]
		prev[r.CPU] = last{tick: r.Major == trace.MajorTprof, pid: r.Field(0), tid: r.Field(1)}
		if r.Major == trace.MajorTprof && int(r.Field(0)) == pid {
			ticks++
		}
		if r.Major != trace.MajorUnwind {
			return nil
		}
		unwinds++
		if r.Minor != trace.UnwindTick || r.Layout != trace.LayoutBytes || len(r.Str)%8 != 0 {
			return fmt.Errorf("UNWIND record with minor %#x layout %d and %d bytes", r.Minor, r.Layout, len(r.Str))
		}
		if !p.tick || p.pid != r.Field(0) || p.tid != r.Field(1) {
			return fmt.Errorf("an UNWIND record of %d/%d on CPU %d does not follow a tick of that thread (previous %+v)", r.Field(0), r.Field(1), r.CPU, p)
		}
		if int(r.Field(0)) != pid {
			return nil
		}
		s := stackRec{kernel: int(r.Field(2) >> trace.UnwindKernShift), truncated: r.Field(2)&trace.UnwindTruncated != 0}
		for i := 0; i < len(r.Str); i += 8 {
			s.pcs = append(s.pcs, binary.LittleEndian.Uint64([]byte(r.Str[i:i+8])))
		}
		if s.kernel > len(s.pcs) {
			return fmt.Errorf("UNWIND: %d kernel PCs of %d", s.kernel, len(s.pcs))
		}
		recs = append(recs, s)
		return nil
	})
	if err == nil && unwinds == 0 {
		err = errors.New("no UNWIND record in the trace")
	}
	return recs, ticks, err
}

// folded runs post --folded on file for pid and returns its lines: the
// frames (process first) and the ticks.
func folded(file string, pid int) (map[string]int, error) {
	out := file + ".folded"
	b, err := exec.Command(stackPost, "-r", file, "-o", filepath.Dir(file), "--pid", strconv.Itoa(pid), "--folded", out).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("post --folded: %v: %s", err, b)
	}
	fh, err := os.Open(out)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	m := map[string]int{}
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		i := strings.LastIndexByte(l, ' ')
		n, err := strconv.Atoi(l[i+1:])
		if i < 0 || err != nil {
			return nil, fmt.Errorf("folded line %q", l)
		}
		m[l[:i]] += n
	}
	return m, sc.Err()
}

func isKernelPC(pc uint64) bool { return pc >= 0xffff800000000000 }

// stacksExample: cpuburn's call paths (main/worker -> work -> heavy, ->
// via_route -> medium, -> light), each thread's path present. With exact
// set (the -icount VM: the clock counts instructions, so ticks fall in
// proportion to instructions) the paths hold the 60/30/10 ratio of
// instructions the example is built with; without it (-smp 2, the clock is
// the host's) the shares are printed and only their order is checked: a
// TCG vCPU is descheduled and resumed by the host, and its ticks land where
// it resumes, so shares there skew with the host's load.
func stacksExample(dir string, exact bool) error {
	units := "40"
	if exact {
		units = "12" // about 500 ticks at 1 kHz of instructions
	}
	file := filepath.Join(dir, "burn.nrm2")
	pid, err := stackRun(file, trace.UnwindMaxDepth, 8<<20, stackBurn, units)
	if err != nil {
		return err
	}
	recs, ticks, err := stackRecords(file, pid)
	if err != nil {
		return err
	}
	if len(recs) < ticks*9/10 || ticks < 100 {
		return fmt.Errorf("cpuburn: %d ticks, %d with a stack", ticks, len(recs))
	}
	for _, r := range recs {
		if r.truncated {
			return fmt.Errorf("cpuburn: a stack of %d PCs marked truncated at the default depth", len(r.pcs))
		}
	}
	lines, err := folded(file, pid)
	if err != nil {
		return err
	}
	paths := map[string]int{}
	total := 0
	for l, n := range lines {
		total += n
		frames := strings.Split(l, ";")
		for j, fr := range frames {
			if fr == "main" || fr == "worker" {
				var user []string
				for _, x := range frames[j:] {
					if !strings.HasSuffix(x, "_[k]") {
						user = append(user, x)
					}
				}
				paths[strings.Join(user, ";")] += n
				break
			}
		}
	}
	// Both threads run the same work; their tick counts can differ
	// under TCG (one vCPU's timer comes late), so the ratio is checked
	// on the paths below main / worker together.
	want := map[string]float64{"work;heavy": 60, "work;via_route;medium": 30, "work;light": 10}
	sum := 0
	for p := range want {
		for _, top := range []string{"main;", "worker;"} {
			sum += paths[top+p]
		}
	}
	// account() (below every worker function), the child's work and
	// libc make up the rest
	if sum < total*7/10 {
		return fmt.Errorf("cpuburn: %d of %d ticks on the expected paths: %v", sum, total, paths)
	}
	got := map[string]float64{}
	for _, p := range []string{"work;heavy", "work;via_route;medium", "work;light"} {
		share := want[p]
		m, w := paths["main;"+p], paths["worker;"+p]
		got[p] = 100 * float64(m+w) / float64(sum)
		fmt.Printf("stacks: cpuburn %-26s %5.1f %% (built for %.0f %% of the instructions): main;%s %d ticks, worker;%s %d\n", p, got[p], share, p, m, p, w)
		// Ticks every million instructions split the shares within a tick or two.
		if exact && (got[p] < share-5 || got[p] > share+5) {
			return fmt.Errorf("cpuburn: %s has %.1f %% of the example's stacks, want %.0f ± 5 %% (-icount: ticks follow instructions): %v", p, got[p], share, paths)
		}
		if m < (m+w)/5 || w < (m+w)/5 {
			return fmt.Errorf("cpuburn: %s: main %d ticks, worker %d: one thread's path is missing: %v", p, m, w, paths)
		}
	}
	if h, m, l := got["work;heavy"], got["work;via_route;medium"], got["work;light"]; !(h > m && m > l) {
		return fmt.Errorf("cpuburn: shares heavy %.1f %%, medium %.1f %%, light %.1f %% are not in the example's order: %v", h, m, l, paths)
	}
	fmt.Printf("stacks: cpuburn: %d ticks of the process, %d with a stack; %d folded ticks (its child too) on the six paths\n", ticks, len(recs), sum)
	return nil
}

// deepest is the frames of the folded line with the most ticks.
func deepest(lines map[string]int) []string {
	best, bn := "", -1
	for l, n := range lines {
		if n > bn {
			best, bn = l, n
		}
	}
	return strings.Split(best, ";")
}

// stacksDeep: a 40-level recursion under a depth limit of 16 is cut at 16
// PCs and marked; under 127 it is whole; a limit of 1 keeps the PC only.
func stacksDeep(dir string) error {
	for _, depth := range []int{16, 1, trace.UnwindMaxDepth} {
		file := filepath.Join(dir, fmt.Sprintf("deep%d.nrm2", depth))
		pid, err := stackRun(file, depth, 8<<20, stackProg, "deep", "40", "2000")
		if err != nil {
			return err
		}
		recs, ticks, err := stackRecords(file, pid)
		if err != nil {
			return err
		}
		cut, whole := 0, 0
		for _, r := range recs {
			if len(r.pcs) > depth {
				return fmt.Errorf("depth %d: a stack of %d PCs", depth, len(r.pcs))
			}
			if r.truncated {
				if len(r.pcs) != depth {
					return fmt.Errorf("depth %d: a truncated stack of %d PCs", depth, len(r.pcs))
				}
				cut++
			} else if len(r.pcs) >= 42 {
				whole++ // bottom, 40 x descend, main
			}
		}
		fmt.Printf("stacks: deep 40 at depth %d: %d ticks, %d stacks, %d truncated, %d whole\n", depth, ticks, len(recs), cut, whole)
		// 30 ticks judge the 8-in-10 shares below (a TCG vCPU beside a
		// busy host gets far fewer ticks than its CPU time would give)
		if ticks < 30 || len(recs) < ticks*9/10 {
			return fmt.Errorf("depth %d: %d ticks, %d stacks", depth, ticks, len(recs))
		}
		lines, err := folded(file, pid)
		if err != nil {
			return err
		}
		top := deepest(lines)
		if depth < 40 {
			// Most ticks fall in the spin 40 calls deep; the rest in
			// the start and exit (more of them where the host
			// starves the vCPU): their stacks are shorter.
			if cut < len(recs)*6/10 {
				return fmt.Errorf("depth %d: only %d of %d stacks truncated", depth, cut, len(recs))
			}
			if len(top) < 2 || top[1] != "[truncated]" {
				return fmt.Errorf("depth %d: post's hottest folded stack is not marked truncated: %v", depth, top)
			}
			continue
		}
		if whole < len(recs)*8/10 {
			return fmt.Errorf("depth %d: only %d of %d stacks whole", depth, whole, len(recs))
		}
		// root -> leaf: ... main; descend x 40; bottom
		n := 0
		for _, fr := range top {
			if fr == "descend" {
				n++
			}
		}
		if top[len(top)-1] != "bottom" || n != 40 || !strings.Contains(strings.Join(top, ";"), "main;descend;") {
			return fmt.Errorf("depth %d: hottest folded stack %v (%d x descend), want main, 40 x descend, bottom", depth, top, n)
		}
	}
	return nil
}

// stacksKernel: a loop of read(2) from /dev/zero has kernel frames first
// (kernel addresses, as many as the record says), the user frames after,
// and post names the read path in the kernel under main -> sysloop ->
// zero_read (the function that makes the system call).
func stacksKernel(dir string) error {
	file := filepath.Join(dir, "sys.nrm2")
	pid, err := stackRun(file, 0, 8<<20, stackProg, "sys", "2000")
	if err != nil {
		return err
	}
	recs, ticks, err := stackRecords(file, pid)
	if err != nil {
		return err
	}
	withK := 0
	for _, r := range recs {
		for i, pc := range r.pcs {
			if isKernelPC(pc) != (i < r.kernel) {
				return fmt.Errorf("PC %d of %d (%#x): kernel address %v, but the record counts %d kernel PCs", i, len(r.pcs), pc, isKernelPC(pc), r.kernel)
			}
		}
		if r.kernel > 1 && len(r.pcs) > r.kernel+2 {
			withK++
		}
	}
	fmt.Printf("stacks: read loop: %d ticks, %d stacks, %d with kernel and user frames\n", ticks, len(recs), withK)
	if ticks < 100 || withK < len(recs)/4 {
		return fmt.Errorf("read loop: %d ticks, %d stacks, %d with kernel and user frames", ticks, len(recs), withK)
	}
	lines, err := folded(file, pid)
	if err != nil {
		return err
	}
	found, kTicks := "", 0
	for l, n := range lines {
		i := strings.Index(l, ";sysloop;zero_read;")
		if i < 0 || !strings.Contains(l[:i], "main") {
			continue
		}
		rest := strings.Split(l[i+1:], ";")
		seenK, readK := false, false
		for _, fr := range rest {
			k := strings.HasSuffix(fr, "_[k]")
			if seenK && !k {
				return fmt.Errorf("a user frame below a kernel frame: %s", l)
			}
			seenK = seenK || k
			readK = readK || k && strings.Contains(fr, "read")
		}
		if readK {
			kTicks += n
			if found == "" || n > lines[found] {
				found = l
			}
		}
	}
	if found == "" {
		return errors.New("read loop: no folded stack has a kernel read frame under main;sysloop;zero_read")
	}
	fmt.Printf("stacks: read loop: %d ticks under a kernel read frame; hottest: %s %d\n", kTicks, found, lines[found])
	return nil
}

// stacksSmallSegment: with 4K trace buffers (1K segments) the limit
// is what a segment holds: the 40-level stack is still recorded.
func stacksSmallSegment(dir string) error {
	file := filepath.Join(dir, "small.nrm2")
	pid, err := stackRun(file, trace.UnwindMaxDepth, 16<<10, stackProg, "deep", "150", "300")
	if err != nil {
		return err
	}
	recs, _, err := stackRecords(file, pid)
	if err != nil && !strings.Contains(err.Error(), "no UNWIND") {
		return err
	}
	max := 0
	for _, r := range recs {
		max = maxInt(max, len(r.pcs))
	}
	fmt.Printf("stacks: 16K buffers (1K segments), 150 levels: %d stacks, the longest %d PCs\n", len(recs), max)
	if len(recs) == 0 || max < 100 || max*8+28+12 > 1024 {
		return fmt.Errorf("16K buffers: %d stacks, the longest %d PCs", len(recs), max)
	}
	return nil
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

// stacksRatio: only the example's 60/30/10 ratio, in the -icount VM.
func stacksRatio() error {
	if _, err := os.Stat(stackPost); err != nil {
		return fmt.Errorf("%s is not in the image: %w", stackPost, err)
	}
	dir, err := os.MkdirTemp("", "stacks")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	defer stacksReset()
	if err := stacksExample(dir, true); err != nil {
		return fmt.Errorf("stacks ratio: %w", err)
	}
	fmt.Println("stacks: ratio ok")
	return nil
}

func stacks() error {
	for _, p := range []string{stackPost, stackBurn, stackProg} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s is not in the image: %w", p, err)
		}
	}
	dir, err := os.MkdirTemp("", "stacks")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	defer stacksReset()
	for _, t := range []struct {
		name string
		f    func(string) error
	}{{"example", func(d string) error { return stacksExample(d, false) }}, {"deep", stacksDeep}, {"kernel", stacksKernel}, {"small segments", stacksSmallSegment}} {
		if err := t.f(dir); err != nil {
			return fmt.Errorf("stacks %s: %w", t.name, err)
		}
	}
	fmt.Println("stacks: ok")
	return nil
}

// stacksReset leaves the module as the tests after these expect it: no
// call stacks, the default depth, no buffers.
func stacksReset() {
	f, err := control.Open("kmod")
	if err != nil {
		return
	}
	defer f.Close()
	_ = f.Disable([]uint16{trace.MajorUnwind})
	if sd, ok := f.(control.StackDepth); ok {
		_ = sd.SetStackDepth(trace.UnwindMaxDepth)
	}
	_ = f.Free()
}
