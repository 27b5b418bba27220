package callflow

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
)

// FoldedCut is what WriteFoldedMax wrote: how many call paths the exact
// folded form has and how many of them it kept as lines of their own.
type FoldedCut struct {
	// Paths: call paths with a BASE (the exact form's lines); Kept: those
	// written as lines of their own (Paths when nothing was cut).
	Paths, Kept int
	// Lines: lines written (a caller that took in its callees' metric
	// has a line even without a BASE of its own).
	Lines int
	// Cut: a call path is a line of its own only if its Cum is above it;
	// one at or below it is counted in its nearest caller that is kept
	// (the thread's line at worst). 0 when nothing was cut.
	Cut uint64
	// Total: the BASE of every thread (what the lines add up to, cut or not).
	Total uint64
	// Exact: bytes of the exact form; Size: bytes written.
	Exact, Size int64
}

// Folded is how many call paths were counted in their callers.
func (fc FoldedCut) Folded() int { return fc.Paths - fc.Kept }

// WriteFoldedMax writes the folded stacks of WriteFolded if they take
// at most limit bytes (or limit <= 0), and else a bounded form with the same
// totals, per thread and per subtree: a call path is a line of its own
// only if its Cum (its subtree's BASE) is above a cut, and one that is
// not is counted, its whole Cum, in the line of its nearest caller that
// is (that caller's line holds its own BASE and the Cum of its callees
// that are not kept; a thread's line is always kept). The cut is chosen
// from the call paths' sizes, heaviest first: an upper bound of each line
// (the path's Cum written in place of its BASE) is added up until limit
// would be passed, and the paths heavier than the first that did not fit
// are kept (ties with it are all dropped). The file then never exceeds
// limit, except when the threads' own lines alone do (a limit too small
// for them): those lines are written all the same (Size says it).
//
// The bounded form relies on each node's Cum being its Base plus its
// children's Cum, as Build makes it. Memory follows the number of call
// paths (16 bytes each when cutting), not the size of the exact form.
func (a *Analysis) WriteFoldedMax(out io.Writer, limit int64) (FoldedCut, error) {
	m := measureFolded(a.Trees)
	fc := FoldedCut{Paths: m.paths, Total: a.Total(), Exact: m.exact}
	if limit <= 0 || m.exact <= limit {
		fc.Kept, fc.Lines, fc.Size = m.paths, m.paths, m.exact
		return fc, a.WriteFolded(out)
	}
	fc.Cut = chooseCut(m.sizes(a.Trees), limit-m.roots)
	fw := newFoldedWriter(out, m.clean, fc.Cut)
	for _, t := range a.Trees {
		fw.tree(t)
	}
	fc.Kept, fc.Lines, fc.Size = fw.kept, fw.lines, fw.size
	if err := fw.w.Flush(); err != nil {
		return fc, fmt.Errorf("writing the folded stacks: %w", err)
	}
	return fc, nil
}

// frameNames cleans function names for the folded lines, each name once.
type frameNames map[string]string

func (c frameNames) get(name string) string {
	s, ok := c[name]
	if !ok {
		s = cleanFrame(name)
		c[name] = s
	}
	return s
}

// digits is the length of v in decimal.
func digits(v uint64) int64 {
	n := int64(1)
	for ; v >= 10; v /= 10 {
		n++
	}
	return n
}

// foldedMeasure is the size of the exact folded form of some trees.
type foldedMeasure struct {
	clean frameNames
	exact int64 // bytes of the exact form
	paths int   // its lines: call paths with a BASE
	roots int64 // an upper bound of the threads' lines in a bounded form
	heavy int   // call paths (not roots) with a Cum: the candidates to keep
}

func measureFolded(trees []*Tree) *foldedMeasure {
	m := &foldedMeasure{clean: frameNames{}}
	for _, t := range trees {
		label := int64(len(threadLabel(t)))
		m.roots += label + 1 + digits(t.Root.Cum) + 1
		m.node(t.Root, label)
	}
	return m
}

// node adds n and its subtree; prefix is the length of n's
// "tid_N;f1;...;fn".
func (m *foldedMeasure) node(n *Node, prefix int64) {
	if n.Base > 0 {
		m.exact += prefix + 1 + digits(n.Base) + 1
		m.paths++
	}
	if n.Parent != nil && n.Cum > 0 {
		m.heavy++
	}
	for _, c := range n.Children {
		m.node(c, prefix+1+int64(len(m.clean.get(c.Name))))
	}
}

// foldedNode is a call path with a Cum and an upper bound of its line in
// a bounded form.
type foldedNode struct {
	cum  uint64
	size int64
}

// sizes lists the call paths (not the roots) with a Cum.
func (m *foldedMeasure) sizes(trees []*Tree) []foldedNode {
	s := make([]foldedNode, 0, m.heavy)
	for _, t := range trees {
		s = m.collect(s, t.Root, int64(len(threadLabel(t))))
	}
	return s
}

// collect appends the nodes of n's subtree (n itself unless a root) with
// a Cum; prefix is the length of n's "tid_N;f1;...;fn".
func (m *foldedMeasure) collect(s []foldedNode, n *Node, prefix int64) []foldedNode {
	if n.Parent != nil {
		if n.Cum == 0 {
			return s // (nor anything below it)
		}
		s = append(s, foldedNode{n.Cum, prefix + 1 + digits(n.Cum) + 1})
	}
	for _, c := range n.Children {
		s = m.collect(s, c, prefix+1+int64(len(m.clean.get(c.Name))))
	}
	return s
}

// chooseCut sorts nodes heaviest first and returns the Cum of the first
// that does not fit in room bytes with those before it (the largest Cum
// when room < 0; 0 when all fit).
func chooseCut(nodes []foldedNode, room int64) uint64 {
	slices.SortFunc(nodes, func(a, b foldedNode) int { return cmp.Compare(b.cum, a.cum) })
	var used int64
	for _, n := range nodes {
		used += n.size
		if used > room {
			return n.cum
		}
	}
	return 0
}

// foldedWriter writes the bounded folded form: the nodes with a Cum above
// cut (and the roots) as lines, each with the Cum of its children that are
// not kept.
type foldedWriter struct {
	w     *bufio.Writer
	clean frameNames
	cut   uint64
	label string
	names []string // the cleaned names of the path being written
	num   []byte
	// what was written
	lines, kept int
	size        int64
}

func newFoldedWriter(out io.Writer, clean frameNames, cut uint64) *foldedWriter {
	return &foldedWriter{w: bufio.NewWriterSize(out, 256<<10), clean: clean, cut: cut}
}

func (f *foldedWriter) keep(n *Node) bool { return n.Cum > f.cut }

// weight is n's line: its own BASE and the Cum of its children not kept.
func (f *foldedWriter) weight(n *Node) uint64 {
	v := n.Base
	for _, c := range n.Children {
		if !f.keep(c) {
			v += c.Cum
		}
	}
	return v
}

func (f *foldedWriter) tree(t *Tree) {
	f.label = threadLabel(t)
	f.node(t.Root)
}

func (f *foldedWriter) node(n *Node) {
	if n.Parent != nil {
		f.names = append(f.names, f.clean.get(n.Name))
	}
	if v := f.weight(n); v > 0 {
		f.line(v)
		if n.Base > 0 {
			f.kept++
		}
	}
	for _, c := range n.Children {
		if f.keep(c) {
			f.node(c)
		}
	}
	if n.Parent != nil {
		f.names = f.names[:len(f.names)-1]
	}
}

// line writes "label;f1;...;fn v" for the path being written.
func (f *foldedWriter) line(v uint64) {
	f.w.WriteString(f.label)
	f.size += int64(len(f.label))
	for _, s := range f.names {
		f.w.WriteByte(';')
		f.w.WriteString(s)
		f.size += 1 + int64(len(s))
	}
	f.num = strconv.AppendUint(append(f.num[:0], ' '), v, 10)
	f.num = append(f.num, '\n')
	f.w.Write(f.num)
	f.size += int64(len(f.num))
	f.lines++
}
