package callflow

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// branchy makes the events of one thread whose call tree has fanout
// callees under every call down to depth levels, each callee a function
// of its own (Java-like names, with the ';' the folded lines clean), the
// leaves charged weights of a skewed spread (a few heavy paths, many
// light ones, ties among the light).
type branchy struct {
	evs    []Event
	t, sp  uint64
	rnd    uint64
	fanout int
	depth  int
	names  map[uint64]string
}

func (g *branchy) ev(kind uint8, fn uint64) {
	g.evs = append(g.evs, Event{Kind: kind, Fn: fn, SP: g.sp, Early: g.t, Late: g.t + 10})
	g.t += 20
}

func (g *branchy) weight() uint64 {
	g.rnd ^= g.rnd << 13
	g.rnd ^= g.rnd >> 7
	g.rnd ^= g.rnd << 17
	w := g.rnd % 64
	return w * w * w / 64
}

func (g *branchy) call(level, branch int) {
	fn := uint64(0x1000 + level*16 + branch)
	g.names[fn] = fmt.Sprintf("com.example.deep.Level%02d.branch%d(Ljava/lang/String;I)V", level, branch)
	g.sp -= 32
	g.ev(KindEnter, fn)
	if level < g.depth {
		for b := 0; b < g.fanout; b++ {
			g.call(level+1, b)
		}
	} else {
		g.t += g.weight()
	}
	g.ev(KindExit, fn)
	g.sp += 32
}

// branchyProcess is two threads of such trees: 3^8 and 4^5 leaves.
func branchyProcess() *Process {
	p := &Process{Info: Info{PID: 9, Metric: "rdtsc"}, Names: map[uint64]string{}}
	for i, shape := range [][2]int{{8, 3}, {5, 4}} {
		g := &branchy{sp: 1 << 30, rnd: uint64(88172645463325252 + i), depth: shape[0], fanout: shape[1], names: p.Names}
		g.call(0, 0)
		p.Threads = append(p.Threads, &Thread{PID: 9, TID: 9 + i, Events: g.evs})
	}
	return p
}

// checkCum fails unless every node's Cum is its Base and its children's
// Cum (what the bounded form relies on).
func checkCum(t *testing.T, n *Node) uint64 {
	t.Helper()
	s := n.Base
	for _, c := range n.Children {
		s += checkCum(t, c)
	}
	if s != n.Cum {
		t.Fatalf("%s: Cum %d, Base and the children's Cum %d", n.Name, n.Cum, s)
	}
	return s
}

// foldedLines parses folded stacks: the weight of each path, and the sum
// per thread.
func foldedLines(t *testing.T, b []byte) (lines map[string]uint64, threads map[string]uint64) {
	t.Helper()
	lines, threads = map[string]uint64{}, map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		i := strings.LastIndexByte(l, ' ')
		v, err := strconv.ParseUint(l[i+1:], 10, 64)
		if i < 0 || err != nil || v == 0 {
			t.Fatalf("folded line %.100q: %v", l, err)
		}
		path := l[:i]
		if _, dup := lines[path]; dup {
			t.Fatalf("path twice: %.100q", path)
		}
		lines[path] = v
		threads[strings.SplitN(path, ";", 2)[0]] += v
	}
	return lines, threads
}

// foldedPath is n's "tid_N;f1;...;fn".
func foldedPath(tr *Tree, n *Node) string {
	s := threadLabel(tr)
	for _, p := range n.Path() {
		s += ";" + cleanFrame(p.Name)
	}
	return s
}

// wantBounded is the bounded form's lines by the rule, made here from the
// tree: a root or a node with a Cum above cut is a line of its own, with
// its Base and the Cum of its children that are not.
func wantBounded(a *Analysis, cut uint64) map[string]uint64 {
	want := map[string]uint64{}
	for _, tr := range a.Trees {
		tr.Root.Walk(func(n *Node) {
			if n.Parent != nil && n.Cum <= cut {
				return
			}
			v := n.Base
			for _, c := range n.Children {
				if c.Cum <= cut {
					v += c.Cum
				}
			}
			if v > 0 {
				want[foldedPath(tr, n)] = v
			}
		})
	}
	return want
}

// treeNode is a call path and its thread's tree.
type treeNode struct {
	tr *Tree
	n  *Node
}

// byCum is every call path (no roots) of a's trees, heaviest first.
func byCum(a *Analysis) []treeNode {
	var ns []treeNode
	for _, tr := range a.Trees {
		tr.Root.Walk(func(n *Node) {
			if n.Parent != nil {
				ns = append(ns, treeNode{tr, n})
			}
		})
	}
	sort.SliceStable(ns, func(i, j int) bool { return ns[i].n.Cum > ns[j].n.Cum })
	return ns
}

func writeFoldedFile(t *testing.T, a *Analysis, limit int64) ([]byte, FoldedCut) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "callflow.folded")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	fc, err := a.WriteFoldedMax(f, limit)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) != fc.Size {
		t.Fatalf("limit %d: %d bytes written, FoldedCut.Size says %d", limit, len(b), fc.Size)
	}
	return b, fc
}

// TestFoldedMaxBoundsTheFile: on a deep, branchy tree whose exact folded
// form is megabytes, WriteFoldedMax keeps the file within its bound, every
// thread's total exact, the heaviest call paths as lines of their own
// (verbatim, each with its own BASE and what its light callees took),
// and only lighter paths folded into their callers.
func TestFoldedMaxBoundsTheFile(t *testing.T) {
	a := AnalyzeWith(branchyProcess(), Calibration{})
	for _, tr := range a.Trees {
		checkCum(t, tr.Root)
	}
	var exact bytes.Buffer
	if err := a.WriteFolded(&exact); err != nil {
		t.Fatal(err)
	}
	exactLines, exactThreads := foldedLines(t, exact.Bytes())
	if exact.Len() < 2<<20 || len(exactThreads) != 2 {
		t.Fatalf("the exact form: %d bytes, %d threads: not the large tree the test needs", exact.Len(), len(exactThreads))
	}
	heavy := byCum(a)
	for _, limit := range []int64{int64(exact.Len()) - 1, 1 << 20, 64 << 10, 8 << 10} {
		b, fc := writeFoldedFile(t, a, limit)
		lines, threads := foldedLines(t, b)
		t.Logf("limit %d: %d bytes, %d lines, %d of %d paths folded, cut %d (%d paths of the exact form, %d bytes)",
			limit, len(b), len(lines), fc.Folded(), fc.Paths, fc.Cut, len(exactLines), exact.Len())
		if int64(len(b)) > limit {
			t.Errorf("limit %d: the file is %d bytes", limit, len(b))
		}
		if fc.Cut == 0 || fc.Folded() <= 0 || fc.Paths != len(exactLines) || fc.Exact != int64(exact.Len()) || fc.Lines != len(lines) {
			t.Errorf("limit %d: FoldedCut %+v; exact form %d lines, %d bytes; %d lines written", limit, fc, len(exactLines), exact.Len(), len(lines))
		}
		var sum uint64
		for th, v := range exactThreads {
			sum += v
			if threads[th] != v {
				t.Errorf("limit %d: %s's lines add up to %d, the exact form's to %d", limit, th, threads[th], v)
			}
		}
		if sum != a.Total() || fc.Total != sum {
			t.Errorf("limit %d: the exact form adds up to %d, Total %d, FoldedCut.Total %d", limit, sum, a.Total(), fc.Total)
		}
		want := wantBounded(a, fc.Cut)
		for p, v := range want {
			if lines[p] != v {
				t.Errorf("limit %d: %.120s: %d, want %d", limit, p, lines[p], v)
			}
		}
		if len(lines) != len(want) {
			t.Errorf("limit %d: %d lines, want %d", limit, len(lines), len(want))
		}
		// The heaviest call paths are there verbatim; whatever is kept
		// is heavier than whatever is folded; the bound is used, not
		// wasted (a quarter at least).
		for _, h := range heavy[:5] {
			p := foldedPath(h.tr, h.n)
			if v, ok := lines[p]; !ok || v < h.n.Base {
				t.Errorf("limit %d: heavy path %.120s (Cum %d, Base %d): %d, present %v", limit, p, h.n.Cum, h.n.Base, v, ok)
			}
		}
		kept := 0
		for kept < len(heavy) && heavy[kept].n.Cum > fc.Cut {
			kept++
		}
		if kept < 5 || int64(len(b)) < limit/4 {
			t.Errorf("limit %d: %d paths kept, %d bytes written: the bound is not used", limit, kept, len(b))
		}
	}
}

// TestFoldedMaxExactWhenItFits: with no bound, or one the exact form fits,
// WriteFoldedMax writes WriteFolded's bytes; the bounded writer with a cut
// of 0 writes them too.
func TestFoldedMaxExactWhenItFits(t *testing.T) {
	a := AnalyzeWith(branchyProcess(), Calibration{})
	var exact bytes.Buffer
	if err := a.WriteFolded(&exact); err != nil {
		t.Fatal(err)
	}
	n := int64(exact.Len())
	for _, limit := range []int64{0, -1, n, n + 1, 1 << 40} {
		b, fc := writeFoldedFile(t, a, limit)
		if !bytes.Equal(b, exact.Bytes()) {
			t.Errorf("limit %d: %d bytes, not the exact form's %d", limit, len(b), n)
		}
		if fc.Cut != 0 || fc.Folded() != 0 || fc.Exact != n || fc.Lines != fc.Paths {
			t.Errorf("limit %d: FoldedCut %+v", limit, fc)
		}
	}
	var cut0 bytes.Buffer
	fw := newFoldedWriter(&cut0, frameNames{}, 0)
	for _, tr := range a.Trees {
		fw.tree(tr)
	}
	if err := fw.w.Flush(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cut0.Bytes(), exact.Bytes()) || fw.size != n {
		t.Errorf("the bounded writer with cut 0: %d bytes (counted %d), not the exact form's %d", cut0.Len(), fw.size, n)
	}
}

// TestFoldedMaxRootLines: a bound too small for the threads' own lines
// writes those lines, each thread's total, and nothing else.
func TestFoldedMaxRootLines(t *testing.T) {
	a := AnalyzeWith(branchyProcess(), Calibration{})
	b, fc := writeFoldedFile(t, a, 10)
	want := ""
	for _, tr := range a.Trees {
		want += fmt.Sprintf("%s %d\n", threadLabel(tr), tr.Root.Cum)
	}
	if string(b) != want || fc.Kept != 0 || fc.Lines != 2 || fc.Size <= 10 {
		t.Fatalf("limit 10: %q (FoldedCut %+v), want %q", b, fc, want)
	}
}
