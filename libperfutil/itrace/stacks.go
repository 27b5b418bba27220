package itrace

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/google/pprof/profile"
	"perfinsp/libperfutil/pprofloc"
)

// Call stacks weighted by instructions (post --itrace-folded, --itrace-pprof):
// every block's instructions go to the thread's call stack at that moment
// (root first, the block's function last), so a flame graph of an ITrace
// shows where instructions were executed, exactly.

type stackKey struct {
	pid       uint32
	stack, fn string // stack: function keys of the frames, root first, "\x01"-separated
}

// EnableStacks makes the replay keep instructions per call stack; call it
// before the first Apply.
func (rep *Report) EnableStacks() { rep.stacks = map[stackKey]uint64{} }

// key returns th's current stack as a map key, cached until it changes.
func (th *threadState) key() string {
	if th.keyOK {
		return th.stackStr
	}
	var b strings.Builder
	b.WriteString(th.base)
	for _, f := range th.stack {
		if f.fn == "" { // a call into a PLT stub, not yet through it
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(1)
		}
		b.WriteString(f.fn)
	}
	th.stackStr, th.keyOK = b.String(), true
	return th.stackStr
}

func (rep *Report) addStack(th *threadState, fn string, count uint32) {
	if rep.stacks == nil {
		return
	}
	if len(th.stack) == 0 && th.base != fn {
		th.base, th.keyOK = fn, false // the function the trace runs in at depth 0
	}
	st := th.key()
	// the innermost frame is the block's function: it is the leaf
	if st == fn {
		st = ""
	} else if strings.HasSuffix(st, "\x01"+fn) {
		st = st[:len(st)-len(fn)-1]
	}
	rep.stacks[stackKey{th.pid, st, fn}] += uint64(count)
}

// frames returns the function names of s, root first.
func (rep *Report) frames(s stackKey) []string {
	var keys []string
	if s.stack != "" {
		keys = strings.Split(s.stack, "\x01")
	}
	keys = append(keys, s.fn)
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = rep.display(k)
	}
	return names
}

func (rep *Report) display(k string) string {
	if f := rep.Funcs[k]; f != nil && f.Name != "" {
		return f.Name
	}
	if name, _, _ := strings.Cut(k, "\x00"); name != "" {
		return name
	}
	return "[unknown]"
}

func (rep *Report) sortedStacks() []stackKey {
	keys := make([]stackKey, 0, len(rep.stacks))
	for k := range rep.stacks {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.pid != b.pid {
			return a.pid < b.pid
		}
		if a.stack != b.stack {
			return a.stack < b.stack
		}
		return a.fn < b.fn
	})
	return keys
}

// WriteFolded writes "pid N;root;...;leaf instructions" lines
// (flamegraph.pl, speedscope), one per distinct stack.
func (rep *Report) WriteFolded(out io.Writer) error {
	if rep.stacks == nil {
		return fmt.Errorf("itrace: stacks were not collected (EnableStacks)")
	}
	w := bufio.NewWriter(out)
	for _, k := range rep.sortedStacks() {
		fmt.Fprintf(w, "pid %d;%s %d\n", k.pid, strings.Join(rep.frames(k), ";"), rep.stacks[k])
	}
	return w.Flush()
}

// WritePprof writes a pprof profile whose one sample type is instructions
// (count): flat = exclusive, cum = inclusive instructions of the ITrace.
func (rep *Report) WritePprof(out io.Writer) error {
	if rep.stacks == nil {
		return fmt.Errorf("itrace: stacks were not collected (EnableStacks)")
	}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "instructions", Unit: "count"}},
		PeriodType: &profile.ValueType{Type: "instructions", Unit: "count"},
		Period:     1,
	}
	tab := pprofloc.New(p)
	loc := func(k string) *profile.Location {
		var file string
		var line int64
		if fs := rep.Funcs[k]; fs != nil {
			file, line = fs.File, int64(fs.Line)
		}
		return tab.Loc(k, rep.display(k), file, line)
	}
	for _, k := range rep.sortedStacks() {
		var keys []string
		if k.stack != "" {
			keys = strings.Split(k.stack, "\x01")
		}
		keys = append(keys, k.fn)
		s := &profile.Sample{Value: []int64{int64(rep.stacks[k])}, NumLabel: map[string][]int64{"pid": {int64(k.pid)}}}
		for i := len(keys) - 1; i >= 0; i-- { // leaf first
			s.Location = append(s.Location, loc(keys[i]))
		}
		p.Sample = append(p.Sample, s)
	}
	if err := p.CheckValid(); err != nil {
		return fmt.Errorf("itrace: pprof profile: %w", err)
	}
	return p.Write(out)
}
