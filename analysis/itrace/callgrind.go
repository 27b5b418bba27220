package itrace

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// CallgrindOptions are the header and positions of a callgrind file.
type CallgrindOptions struct {
	Cmd   string // the traced command (callgrind's cmd:)
	PID   uint32 // its process (0: not written)
	Trace string // the trace file it was replayed from ("": not written)
	// Blocks, when not nil, gives instruction positions (positions: instr
	// line): each block's instructions at its first instruction's address,
	// each call at its call instruction, so that a viewer's machine-code
	// view shows them; nil: source lines only (positions: line).
	Blocks *Blocks
}

// WriteCallgrind writes the report in the callgrind format with source
// line positions and cmd as its command (WriteCallgrindWith).
func (rep *Report) WriteCallgrind(out io.Writer, cmd string) error {
	return rep.WriteCallgrindWith(out, CallgrindOptions{Cmd: cmd})
}

// WriteCallgrindWith writes the report in the callgrind format (one event,
// Ir: instructions), so KCachegrind, QCachegrind and callgrind_annotate
// open it: per function its exclusive instructions by source line (the
// line of each block's start; line 0 where DWARF has none) — and with
// o.Blocks by instruction address — and per call arc the calls and the
// callee's inclusive instructions. Object, file and function names are
// compressed as callgrind writes them: "(N) name" the first time, "(N)"
// after.
func (rep *Report) WriteCallgrindWith(out io.Writer, o CallgrindOptions) error {
	w := bufio.NewWriter(out)
	positions := "line"
	if o.Blocks != nil {
		positions = "instr line"
	}
	fmt.Fprintf(w, "# callgrind format\nversion: 1\ncreator: perfinsp post\n")
	if o.PID != 0 {
		fmt.Fprintf(w, "pid: %d\n", o.PID)
	}
	fmt.Fprintf(w, "cmd: %s\n", oneLine(o.Cmd))
	if o.Trace != "" {
		fmt.Fprintf(w, "desc: Trace: %s\n", oneLine(o.Trace))
	}
	fmt.Fprintf(w, "positions: %s\nevents: Ir\nsummary: %d\n\n", positions, rep.Instructions)
	names := cgNames{ids: map[string]int{}}
	for _, fs := range rep.Sorted() {
		if fs.Exclusive == 0 && len(fs.Callees) == 0 {
			continue
		}
		k := Key(fs.Func)
		fmt.Fprintf(w, "ob=%s\nfl=%s\nfn=%s\n", names.get("ob", fs.Module), names.get("fl", orUnknown(fs.File)), names.get("fn", fs.Name))
		if o.Blocks != nil {
			o.Blocks.writeCosts(w, &names, k, fs)
		} else {
			lines := make([]int, 0, len(fs.Lines))
			for l := range fs.Lines {
				lines = append(lines, l)
			}
			sort.Ints(lines)
			for _, l := range lines {
				fmt.Fprintf(w, "%d %d\n", l, fs.Lines[l])
			}
			if len(lines) == 0 {
				fmt.Fprintf(w, "%d 0\n", fs.Line)
			}
		}
		keys := make([]string, 0, len(fs.Callees))
		for k := range fs.Callees {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, ck := range keys {
			a := fs.Callees[ck]
			c := rep.Funcs[ck]
			if c == nil {
				continue
			}
			fmt.Fprintf(w, "cob=%s\ncfl=%s\ncfn=%s\n", names.get("ob", c.Module), names.get("fl", orUnknown(c.File)), names.get("fn", c.Name))
			if o.Blocks != nil {
				fmt.Fprintf(w, "calls=%d 0x%x %d\n0x%x %d %d\n", a.Calls, o.Blocks.entries[ck], c.Line, o.Blocks.sites[[2]string{k, ck}], a.Line, a.Inclusive)
			} else {
				fmt.Fprintf(w, "calls=%d %d\n%d %d\n", a.Calls, c.Line, a.Line, a.Inclusive)
			}
		}
		w.WriteByte('\n')
	}
	fmt.Fprintf(w, "totals: %d\n", rep.Instructions)
	return w.Flush()
}

// writeCosts writes function k's cost lines by instruction: its blocks in
// address order (and, should the blocks hold fewer instructions than the
// function's count, the rest at address 0). A line of another file than
// the function's (a function inlined from a header) follows an fi= line
// naming its file, as callgrind writes it; the file goes back to the
// function's (fe=) before the next line of it and before the calls.
func (bl *Blocks) writeCosts(w *bufio.Writer, names *cgNames, k string, fs *FuncStats) {
	m := bl.counts[k]
	if spans := bl.spans[k]; len(spans) > 0 {
		m = bl.spread(m, spans)
	}
	pos := make([]blockPos, 0, len(m))
	var sum uint64
	for p, n := range m {
		pos = append(pos, p)
		sum += n
	}
	sort.Slice(pos, func(i, j int) bool {
		if pos[i].addr != pos[j].addr {
			return pos[i].addr < pos[j].addr
		}
		return pos[i].line < pos[j].line
	})
	fnFile := orUnknown(fs.File)
	cur := fnFile
	setFile := func(file string) {
		if file == cur {
			return
		}
		kind := "fi"
		if file == fnFile {
			kind = "fe"
		}
		fmt.Fprintf(w, "%s=%s\n", kind, names.get("fl", file))
		cur = file
	}
	for _, p := range pos {
		if p.file != "" {
			setFile(p.file)
		}
		fmt.Fprintf(w, "0x%x %d %d\n", p.addr, p.line, m[p])
	}
	setFile(fnFile)
	if sum < fs.Exclusive || len(pos) == 0 {
		fmt.Fprintf(w, "0 %d %d\n", fs.Line, fs.Exclusive-min(sum, fs.Exclusive))
	}
}

// spread is a function's costs by instruction: its blocks' counts at
// their first instructions (m) and its spans spread over their
// instructions, each at its own line (a span that cannot be spread: at
// its first instruction).
func (bl *Blocks) spread(m map[blockPos]uint64, spans map[spanPos]*spanRuns) map[blockPos]uint64 {
	out := make(map[blockPos]uint64, len(m)+4*len(spans))
	for p, n := range m {
		out[p] += n
	}
	lines := map[[2]any]blockPos{}
	for sp, r := range spans {
		ok := bl.Spreader.Spread(sp.mod, sp.addr, sp.last, r.runs, r.insns, func(va, n uint64) {
			key := [2]any{sp.mod, va}
			pos, known := lines[key]
			if !known {
				pos = blockPos{va, sp.file, sp.line}
				if f, l, ok := bl.Spreader.Line(sp.mod, va); ok {
					pos.file, pos.line = f, l
				}
				lines[key] = pos
			}
			out[pos] += n
		})
		if !ok {
			out[blockPos{sp.addr, sp.file, sp.line}] += r.insns
		}
	}
	return out
}

// cgNames compresses callgrind names: each kind's (ob, fl, fn) names
// numbered in the order written.
type cgNames struct {
	ids  map[string]int
	next map[string]int
}

func (c *cgNames) get(kind, name string) string {
	k := kind + "\x00" + name
	if id, ok := c.ids[k]; ok {
		return fmt.Sprintf("(%d)", id)
	}
	if c.next == nil {
		c.next = map[string]int{}
	}
	c.next[kind]++
	id := c.next[kind]
	c.ids[k] = id
	return fmt.Sprintf("(%d) %s", id, oneLine(name))
}

// BusiestProcess is the process whose traced threads ran the most
// instructions (ok false: none ran any): the traced command of a
// callgrind file.
func (rep *Report) BusiestProcess() (pid uint32, ok bool) {
	per := map[uint32]uint64{}
	for _, th := range rep.threads {
		per[th.pid] += th.total
	}
	var most uint64
	for p, n := range per {
		if n > most || n == most && ok && p < pid {
			pid, most, ok = p, n, n > 0
		}
	}
	return pid, ok
}

// oneLine is s with line ends made spaces (a header or name is one line).
func oneLine(s string) string {
	return strings.NewReplacer("\n", " ", "\r", " ").Replace(s)
}

func orUnknown(s string) string {
	if s == "" {
		return "???"
	}
	return s
}

// CGFunc is one function of a parsed callgrind file.
type CGFunc struct {
	Name   string
	Object string
	Self   uint64 // exclusive Ir
	Calls  uint64 // calls into it, from every caller
}

// ParseCallgrind reads a callgrind file (this package's or valgrind's,
// compressed names and positions included) and returns per function (by
// name, recursion suffixes such as fib'2 merged) the exclusive Ir and the
// calls into it. Only the first event is read.
func ParseCallgrind(in io.Reader) (map[string]*CGFunc, error) {
	out := map[string]*CGFunc{}
	names := map[string]map[string]string{} // kind -> id -> name
	resolve := func(kind, v string) string {
		if names[kind] == nil {
			names[kind] = map[string]string{}
		}
		if strings.HasPrefix(v, "(") {
			if i := strings.IndexByte(v, ')'); i > 0 {
				id, rest := v[:i+1], strings.TrimSpace(v[i+1:])
				if rest != "" {
					names[kind][id] = rest
					return rest
				}
				return names[kind][id]
			}
		}
		return v
	}
	get := func(name, obj string) *CGFunc {
		if i := strings.LastIndexByte(name, '\''); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		f := out[name]
		if f == nil {
			f = &CGFunc{Name: name, Object: obj}
			out[name] = f
		}
		return f
	}
	var cur *CGFunc
	var ob, cob, cfn string
	callLine := false
	npos := 1 // positions per cost line (positions: line)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		key, val, isKV := strings.Cut(l, "=")
		if isKV && !strings.ContainsAny(key, " \t+-*") {
			switch key {
			case "ob":
				ob = resolve("ob", val)
			case "fn":
				cur = get(resolve("fn", val), ob)
				cob = ""
			case "cob":
				cob = resolve("ob", val)
			case "cfn", "cfi", "cfl":
				if key == "cfn" {
					cfn = resolve("fn", val)
				} else {
					resolve("fl", val)
				}
			case "fl", "fi", "fe":
				resolve("fl", val)
			case "calls":
				f := strings.Fields(val)
				if len(f) == 0 {
					return nil, fmt.Errorf("callgrind line %d: calls= without a count", n)
				}
				c, err := strconv.ParseUint(f[0], 10, 64)
				if err != nil {
					return nil, fmt.Errorf("callgrind line %d: %w", n, err)
				}
				o := cob
				if o == "" {
					o = ob
				}
				get(cfn, o).Calls += c
				callLine = true
			}
			continue
		}
		if v, ok := strings.CutPrefix(l, "positions:"); ok {
			npos = max(1, len(strings.Fields(v))) // (instr line: two positions before the costs)
			continue
		}
		if strings.Contains(l, ":") && !strings.HasPrefix(l, "+") && !strings.HasPrefix(l, "-") && !strings.HasPrefix(l, "*") && (l[0] < '0' || l[0] > '9') {
			continue // header lines (version:, events:, totals: ...)
		}
		f := strings.Fields(l)
		if callLine {
			callLine = false // the inclusive cost line after calls=
			continue
		}
		if cur == nil || len(f) < npos+1 {
			continue
		}
		v, err := strconv.ParseUint(f[npos], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("callgrind line %d: cost %q: %w", n, f[npos], err)
		}
		cur.Self += v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read callgrind file: %w", err)
	}
	return out, nil
}
