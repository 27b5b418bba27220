package callflow

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// EnvFromArc measures the environmental overhead (seed 003 §4.2, seed
// 000): the true minimum per sequence key of the instructions between two
// events, from the ITrace of the uninstrumented trainer (the arc report
// of `post -arc`, which scripts/run.itrace writes): the glue code that
// runs even without instrumentation and must stay in the result. Events
// are the calls into and returns from the functions in funcs (the ones
// the instrumented run recorded), placed where the hooks see them: an
// entry just after the call instruction, an exit just before the return
// instruction. Calls of other functions stay in the interval, as in the
// instrumented run. Method types are not in an ITrace of C code: every
// method is type 0 (other).
func EnvFromArc(r io.Reader, funcs map[string]bool, k SeqKey) (*Minima, error) {
	type thread struct {
		c       uint64 // instructions so far
		pending bool   // a call whose callee the next line names
		callPos uint64
		have    bool
		lastT   int
		lastPos uint64
	}
	env := NewMinima(k)
	threads := map[string]*thread{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if line <= 2 {
			if line == 1 && !strings.HasPrefix(sc.Text(), "arc of ") {
				return nil, fmt.Errorf("not an ITrace arc report (post -arc): first line %q", sc.Text())
			}
			continue
		}
		if len(f) < 9 {
			continue
		}
		typ, e1 := strconv.Atoi(f[2])
		n, e2 := strconv.ParseUint(f[3], 10, 64)
		if e1 != nil || e2 != nil {
			return nil, fmt.Errorf("arc line %d: want CPU K/U TYPE INSTS ..., got %q", line, sc.Text())
		}
		th := threads[f[4]]
		if th == nil {
			th = &thread{}
			threads[f[4]] = th
		}
		sym, _, _ := strings.Cut(f[6], ":")
		boundary := func(t int, pos uint64) {
			if th.have && pos >= th.lastPos {
				env.Add(k.Of(0, th.lastT, 0, t, 0), pos-th.lastPos)
			}
			th.have, th.lastT, th.lastPos = true, t, pos
		}
		th.c += n
		if th.pending {
			th.pending = false
			if funcs[sym] { // the callee: the next branch is in it
				boundary(TransEnter, th.callPos)
			}
		}
		if f[1] != "U" {
			continue // system calls and signals: their instructions are counted
		}
		switch typ {
		case 1: // CALL: the entry event comes after the call instruction
			th.pending, th.callPos = true, th.c
		case 2: // RETURN: the exit event comes before the return instruction
			if funcs[sym] {
				boundary(TransExit, th.c-1)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the arc report: %w", err)
	}
	if len(env.Min) == 0 {
		return nil, fmt.Errorf("the arc report has no call or return of the recorded functions: trace the uninstrumented trainer (scripts/run.itrace)")
	}
	return env, nil
}

// EnvDefault is the environmental overhead assumed for a key the trainer's
// ITrace did not cover (seed 003: "keys not covered assume 1").
const EnvDefault = 1

// RecordedFuncs names every function entered in p's threads.
func RecordedFuncs(p *Process) map[string]bool {
	nm := ProcessNamer(p)
	out := map[string]bool{}
	for _, t := range p.Threads {
		for _, e := range t.Events {
			if e.Kind == KindEnter {
				out[nm.Name(e.Fn)] = true
			}
		}
	}
	return out
}

// LoadEnv reads the arc report at path and measures the environmental
// overhead of p's functions (EnvFromArc), keyed k.
func LoadEnv(path string, p *Process, k SeqKey) (*Minima, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening the trainer's arc report: %w", err)
	}
	defer f.Close()
	env, err := EnvFromArc(f, RecordedFuncs(p), k)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return env, nil
}
