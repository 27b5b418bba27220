package callflow

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// EnvFromArc measures the environmental overhead (PI's paper §4.2; the
// overhead-compensation patent): the true minimum per sequence key of the instructions between two
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
	err := scanArc(r, func(a arcLine) {
		typ, n, sym := a.typ, a.n, a.sym
		th := threads[a.thread]
		if th == nil {
			th = &thread{}
			threads[a.thread] = th
		}
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
		if a.kernel {
			return // system calls and signals: their instructions are counted
		}
		switch typ {
		case 1: // CALL: the entry event comes after the call instruction
			th.pending, th.callPos = true, th.c
		case 2: // RETURN: the exit event comes before the return instruction
			if funcs[sym] {
				boundary(TransExit, th.c-1)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if len(env.Min) == 0 {
		return nil, fmt.Errorf("the arc report has no call or return of the recorded functions: trace the uninstrumented trainer (scripts/run.itrace)")
	}
	return env, nil
}

// EnvDefault is the environmental overhead assumed for a key the trainer's
// ITrace did not cover (PI's paper: "keys not covered assume 1").
const EnvDefault = 1

// RecordedFuncs names every function entered in p's threads.
func RecordedFuncs(p *Process) (map[string]bool, error) {
	nm := ProcessNamer(p)
	out := map[string]bool{}
	seen := map[uint64]bool{}
	for _, t := range p.Threads {
		if err := t.Each(func(e *Event) {
			if e.Kind == KindEnter && !seen[e.Fn] {
				seen[e.Fn] = true
				out[nm.Name(e.Fn)] = true
			}
		}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// LoadEnv reads the arc report at path and measures the environmental
// overhead of p's functions (EnvFromArc), keyed k.
func LoadEnv(path string, p *Process, k SeqKey) (*Minima, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening the trainer's arc report: %w", err)
	}
	defer f.Close()
	funcs, err := RecordedFuncs(p)
	if err != nil {
		return nil, err
	}
	env, err := EnvFromArc(f, funcs, k)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return env, nil
}

// Reference is what an instrumented program's own code does as the hooks
// see it: from the ITrace of the instrumented binary run with the hooks
// not recording (HOOKIT_DIR unset: they return at once), each interval
// between two hook calls — the program's instructions only, the hook
// library's own left out — charged to the function on top of the hooks'
// stack, exactly as libhookit charges its intervals. The exact figure a
// calibrated call flow of the same binary should give.
type Reference struct {
	Self  map[string]uint64 // instructions per function
	Calls map[string]uint64 // entries per function
	// Env is the true minimum per sequence key of those intervals: the
	// program's own part of every interval of that key (with Min - Env,
	// the calibration then takes off exactly the hook library's part).
	Env *Minima
}

// Hook entry points of -finstrument-functions.
const (
	hookEnter = "__cyg_profile_func_enter"
	hookExit  = "__cyg_profile_func_exit"
)

// ReferenceFromArc reads the arc report (post -arc) of the ITrace of an
// instrumented binary whose hooks did not record, keyed k (all methods
// type 0: C code).
func ReferenceFromArc(r io.Reader, k SeqKey) (*Reference, error) {
	type thread struct {
		c       uint64 // program instructions so far
		depth   int    // > 0: inside a hook (its calls nested)
		pending bool   // a call whose callee the next line names
		callPos uint64
		caller  string
		stack   []string
		have    bool
		lastT   int
		lastPos uint64
	}
	ref := &Reference{Self: map[string]uint64{}, Calls: map[string]uint64{}, Env: NewMinima(k)}
	threads := map[string]*thread{}
	hooks := 0
	err := scanArc(r, func(a arcLine) {
		typ, n, sym := a.typ, a.n, a.sym
		th := threads[a.thread]
		if th == nil {
			th = &thread{}
			threads[a.thread] = th
		}
		if th.pending {
			th.pending = false
			if sym == hookEnter || sym == hookExit {
				hooks++
				t := TransEnter
				if sym == hookExit {
					t = TransExit
				}
				top := ""
				if len(th.stack) > 0 {
					top = th.stack[len(th.stack)-1]
				}
				d := th.callPos - th.lastPos
				if th.have {
					ref.Self[top] += d
					ref.Env.Add(k.Of(0, th.lastT, 0, t, 0), d)
				}
				th.have, th.lastT, th.lastPos = true, t, th.callPos
				if t == TransEnter {
					th.stack = append(th.stack, th.caller)
					ref.Calls[th.caller]++
				} else {
					i := len(th.stack) - 1
					for i >= 0 && th.stack[i] != th.caller {
						i--
					}
					if i >= 0 {
						th.stack = th.stack[:i]
					}
				}
				th.depth = 1
			}
		}
		if th.depth > 0 { // the hook library's instructions
			if !a.kernel {
				switch typ {
				case 1:
					th.depth++
				case 2:
					th.depth--
				}
			}
			return
		}
		th.c += n
		if !a.kernel && typ == 1 {
			th.pending, th.callPos, th.caller = true, th.c, sym
		}
	})
	if err != nil {
		return nil, err
	}
	if hooks == 0 {
		return nil, fmt.Errorf("the arc report has no call of %s: trace the instrumented binary with its hooks not recording", hookEnter)
	}
	delete(ref.Self, "") // the threads' time outside instrumented functions
	return ref, nil
}

// arcLine is one branch line of an arc report (post -arc).
type arcLine struct {
	kernel bool   // K: a system call or signal, not a user branch
	typ    int    // 1 CALL, 2 RETURN, ... (docs/itrace.md)
	n      uint64 // instructions since the previous branch
	thread string // pid_tid
	sym    string // the symbol the branch is in (without :module)
}

// scanArc calls each for every branch line of the arc report r.
func scanArc(r io.Reader, each func(arcLine)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		if line <= 2 {
			if line == 1 && !strings.HasPrefix(sc.Text(), "arc of ") {
				return fmt.Errorf("not an ITrace arc report (post -arc): first line %q", sc.Text())
			}
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 9 {
			continue
		}
		typ, e1 := strconv.Atoi(f[2])
		n, e2 := strconv.ParseUint(f[3], 10, 64)
		if e1 != nil || e2 != nil {
			return fmt.Errorf("arc line %d: want CPU K/U TYPE INSTS ..., got %q", line, sc.Text())
		}
		sym, _, _ := strings.Cut(f[6], ":")
		each(arcLine{kernel: f[1] != "U", typ: typ, n: n, thread: f[4], sym: sym})
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading the arc report: %w", err)
	}
	return nil
}
