package itrace

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// WriteCallgrind writes the report in the callgrind format (one event,
// Ir: instructions), so KCachegrind, QCachegrind and callgrind_annotate
// open it: per function its exclusive instructions by source line (the
// line of each block's start; line 0 where DWARF has none) and per call
// arc the calls and the callee's inclusive instructions.
func (rep *Report) WriteCallgrind(out io.Writer, cmd string) error {
	w := bufio.NewWriter(out)
	fmt.Fprintf(w, "# callgrind format\nversion: 1\ncreator: perfinsp post\ncmd: %s\npositions: line\nevents: Ir\nsummary: %d\n\n", cmd, rep.Instructions)
	for _, fs := range rep.Sorted() {
		if fs.Exclusive == 0 && len(fs.Callees) == 0 {
			continue
		}
		fmt.Fprintf(w, "ob=%s\nfl=%s\nfn=%s\n", fs.Module, orUnknown(fs.File), fs.Name)
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
		keys := make([]string, 0, len(fs.Callees))
		for k := range fs.Callees {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			a := fs.Callees[k]
			c := rep.Funcs[k]
			if c == nil {
				continue
			}
			fmt.Fprintf(w, "cob=%s\ncfl=%s\ncfn=%s\ncalls=%d %d\n%d %d\n", c.Module, orUnknown(c.File), c.Name, a.Calls, c.Line, a.Line, a.Inclusive)
		}
		w.WriteByte('\n')
	}
	fmt.Fprintf(w, "totals: %d\n", rep.Instructions)
	return w.Flush()
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
		if strings.Contains(l, ":") && !strings.HasPrefix(l, "+") && !strings.HasPrefix(l, "-") && !strings.HasPrefix(l, "*") && (l[0] < '0' || l[0] > '9') {
			continue // header lines (version:, events:, totals: ...)
		}
		f := strings.Fields(l)
		if callLine {
			callLine = false // the inclusive cost line after calls=
			continue
		}
		if cur == nil || len(f) < 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("callgrind line %d: cost %q: %w", n, f[1], err)
		}
		cur.Self += v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read callgrind file: %w", err)
	}
	return out, nil
}
