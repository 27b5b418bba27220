package itrace

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"perfinsp/internal/testenv"

	"perfinsp/format/trace"

	itracerep "perfinsp/analysis/itrace"
)

// capture is a Sink keeping every record.
type capture struct {
	mu   sync.Mutex
	recs []trace.Record
}

func (c *capture) Trace(cpu int, major uint16, minor uint32, t uint64, fields []uint64) {
	c.mu.Lock()
	c.recs = append(c.recs, trace.Record{CPU: cpu, Major: major, Minor: minor, Time: t, Fixed: append([]uint64(nil), fields...)})
	c.mu.Unlock()
}

// elfNamer names the addresses of one non-PIE executable by its symbol
// table; everything else is "other".
type elfNamer struct {
	syms []elf.Symbol
	plt  [][2]uint64
}

func newELFNamer(t *testing.T, path string) *elfNamer {
	f, fn := testenv.ELF(t, path)
	sort.Slice(fn, func(i, j int) bool { return fn[i].Value < fn[j].Value })
	n := &elfNamer{syms: fn}
	for _, s := range f.Sections {
		if strings.HasPrefix(s.Name, ".plt") {
			n.plt = append(n.plt, [2]uint64{s.Addr, s.Addr + s.Size})
		}
	}
	return n
}

func (n *elfNamer) Func(pid uint32, addr uint64) (itracerep.Func, uint64, string, int) {
	i := sort.Search(len(n.syms), func(i int) bool { return n.syms[i].Value > addr }) - 1
	if i >= 0 && addr < n.syms[i].Value+n.syms[i].Size {
		return itracerep.Func{Name: n.syms[i].Name, Module: "exe"}, addr - n.syms[i].Value, "", 0
	}
	for _, r := range n.plt {
		if addr >= r[0] && addr < r[1] {
			return itracerep.Func{Name: "plt", Module: "exe", PLT: true}, 0, "", 0
		}
	}
	return itracerep.Func{Name: "other", Module: "other"}, 0, "", 0
}

func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		testenv.Missing(t, "%s is not installed (scripts/deps/itrace.txt; make deps)", name)
	}
	return p
}

// startStopped starts prog stopped just before its exec (as run.itrace
// does) and returns the command.
func startStopped(t *testing.T, prog string, args ...string) *exec.Cmd {
	cmd := exec.Command("sh", append([]string{"-c", `kill -STOP $$; exec "$0" "$@"`, prog}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitState(t, cmd.Process.Pid, 'T')
	return cmd
}

// traceToEnd traces cmd (started stopped, startStopped) from its exec
// with opts into sink, lets it run and returns the tracer's figures
// once it ended.
func traceToEnd(t *testing.T, cmd *exec.Cmd, opts Options, sink Sink) Stats {
	t.Helper()
	return traceToEndBeside(t, cmd, opts, sink, nil)
}

// traceToEndBeside is traceToEnd with beside (if not nil) running, from
// the program's start until the tracer ended, in a goroutine of its own.
func traceToEndBeside(t *testing.T, cmd *exec.Cmd, opts Options, sink Sink, beside func(p *os.Process, done <-chan struct{})) Stats {
	t.Helper()
	opts.PIDs, opts.AtExec = []int{cmd.Process.Pid}, true
	if opts.Log == nil {
		opts.Log = t.Logf
	}
	tr, err := Start(opts, sink)
	if err != nil {
		cmd.Process.Kill()
		t.Fatal(err)
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	if beside != nil {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			beside(cmd.Process, tr.Done())
		}()
		defer wg.Wait()
	}
	// The tracer ends when the program's last thread exited. (Waiting for
	// the child before that would take the tracer's ptrace stops: the test
	// process is both the parent and the tracer.)
	select {
	case <-tr.Done():
	case <-time.After(180 * time.Second):
		tr.Stop()
		t.Fatal("tracer did not end within 180 s")
	}
	_ = cmd.Wait() // the tracer, in this process, may have reaped it already
	return tr.Stats()
}

// waitState waits until the process is in state st (a condition, checked
// until it holds or 10 s passed).
func waitState(t *testing.T, pid int, st byte) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err == nil {
			if i := strings.LastIndexByte(string(b), ')'); i > 0 && i+2 < len(b) && b[i+2] == st {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d never reached state %c", pid, st)
		}
		time.Sleep(time.Millisecond)
	}
}

func replay(recs []trace.Record, namer itracerep.Namer) *itracerep.Report {
	rep := itracerep.NewReport(namer, nil)
	for i := range recs {
		rep.Apply(&recs[i])
	}
	rep.Finish()
	return rep
}

var ownFuncs = []string{"main", "fib", "leaf", "leaf_loop", "apply", "op_add", "op_mul", "copy_rep", "on_signal", "worker", "use_libm"}

// callgrind runs valgrind --tool=callgrind on prog and parses the result.
func callgrind(t *testing.T, dir, prog string, args ...string) map[string]*itracerep.CGFunc {
	needTool(t, "valgrind")
	out := filepath.Join(dir, "callgrind.out")
	cmd := exec.Command("valgrind", append([]string{"--tool=callgrind", "--callgrind-out-file=" + out, prog}, args...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("valgrind: %v\n%s", err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cg, err := itracerep.ParseCallgrind(f)
	if err != nil {
		t.Fatal(err)
	}
	return cg
}

// example is the bundled example built once for the tests that trace it,
// with callgrind's counts of the same run.
var example struct {
	once sync.Once
	dir  string
	prog string
	cg   map[string]*itracerep.CGFunc
	err  string
}

const exampleN = "20000"

func exampleProg(t *testing.T) (string, map[string]*itracerep.CGFunc) {
	t.Helper()
	needTool(t, "gcc")
	needTool(t, "valgrind")
	example.once.Do(func() {
		dir, err := os.MkdirTemp("", "itrace-example")
		if err != nil {
			example.err = err.Error()
			return
		}
		example.dir = dir
		prog := filepath.Join(dir, "itrace")
		if b, err := exec.Command("gcc", "-O1", "-g", "-fno-inline", "-fno-optimize-sibling-calls", "-pthread", "-no-pie",
			"-o", prog, "../../examples/itrace.c", "-lm").CombinedOutput(); err != nil {
			example.err = fmt.Sprintf("gcc: %v\n%s", err, b)
			return
		}
		example.prog = prog
		example.cg = callgrind(t, dir, prog, exampleN)
	})
	if example.err != "" {
		t.Fatal(example.err)
	}
	if example.cg == nil {
		t.Fatal("callgrind of the example failed (see the first test that ran it)")
	}
	return example.prog, example.cg
}

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == HelperArg {
		os.Exit(HelperMain()) // the Manager's sessions run this binary as their tracer
	}
	rc := testenv.Run(m)
	if example.dir != "" {
		os.RemoveAll(example.dir)
	}
	os.Exit(rc)
}

// traceExample traces the bundled example from its first instruction
// with opts and checks every one of its own functions' exclusive
// instructions and calls against callgrind's, exactly.
func traceExample(t *testing.T, opts Options) Stats {
	st, _ := traceExampleRecords(t, opts)
	return st
}

// traceExampleRecords is traceExample that also returns the records.
func traceExampleRecords(t *testing.T, opts Options) (Stats, []trace.Record) {
	return traceExampleBeside(t, opts, nil)
}

// traceExampleBeside is traceExampleRecords with beside, if not nil,
// running while the example is traced (given the example's process and
// a channel closed when the tracer ended).
func traceExampleBeside(t *testing.T, opts Options, beside func(p *os.Process, done <-chan struct{})) (Stats, []trace.Record) {
	prog, cg := exampleProg(t)
	cmd := startStopped(t, prog, exampleN)
	sink := &capture{}
	st := traceToEndBeside(t, cmd, opts, sink, beside)
	t.Logf("traced %d instructions, %d records, %d threads, %d syscalls, %d signals", st.Instructions, st.Records, st.Traced, st.Syscalls, st.Signals)
	t.Logf("stepping %q: BTF %q, %d single steps, %d block steps; block decoder: %d checked, %d disagreements, %d ambiguous, %d uncounted; %d lost traps",
		st.Step, st.BTF, st.SingleSteps, st.BlockSteps, st.BlocksChecked, st.BlockMismatches, st.BlocksAmbiguous, st.BlocksLost, st.LostTraps)
	rep := replay(sink.recs, newELFNamer(t, prog))
	if st.Traced < 2 {
		t.Errorf("traced %d threads, want the main thread and the worker", st.Traced)
	}
	// The example raises SIGUSR1 once, with a handler; any other signal
	// seen while stepping (the test's own SIGCONT, when the machine is
	// loaded enough for it to be dequeued after the exec) is recorded but
	// is not the example's.
	usr1 := 0
	for _, r := range sink.recs {
		if r.Major == trace.MajorITraceK && r.Minor == trace.ITraceSignal && len(r.Fixed) >= 5 {
			if r.Fixed[3] == uint64(syscall.SIGUSR1) {
				usr1++
				if r.Fixed[4] != trace.ITraceSignalHandler {
					t.Errorf("SIGUSR1 recorded without its handler: %v", r.Fixed)
				}
			} else {
				t.Logf("also recorded: signal %d (%v)", r.Fixed[3], syscall.Signal(r.Fixed[3]))
			}
		}
	}
	if usr1 != 1 || st.Signals < 1 {
		t.Errorf("%d SIGUSR1 records (%d signals in all), want 1", usr1, st.Signals)
	}
	for _, name := range ownFuncs {
		want := cg[name]
		got := rep.Funcs[itracerep.Key(itracerep.Func{Name: name, Module: "exe"})]
		if want == nil || got == nil {
			t.Errorf("%s: callgrind %v, itrace %v", name, want, got)
			continue
		}
		if got.Exclusive != want.Self || got.Calls != want.Calls {
			t.Errorf("%-10s itrace: %d instructions, %d calls; callgrind: %d, %d", name, got.Exclusive, got.Calls, want.Self, want.Calls)
		} else {
			t.Logf("%-10s %8d instructions %6d calls (= callgrind)", name, got.Exclusive, got.Calls)
		}
	}
	if t.Failed() {
		fmt.Println("records:", len(sink.recs))
	}
	return st, sink.recs
}

// TestExampleMatchesCallgrind traces the bundled example with the default
// stepping (auto): the first block step tells whether the CPU honours
// BTF; where it does not (TCG, hypervisors: this machine), the session
// says so and single-steps; either way the counts equal callgrind's.
func TestExampleMatchesCallgrind(t *testing.T) {
	st := traceExample(t, Options{})
	if st.BTF != "ignored" && st.BTF != "honoured" {
		t.Errorf("BTF detection: %q after a whole run, want ignored or honoured", st.BTF)
	}
	if cpu, _ := os.ReadFile("/proc/cpuinfo"); strings.Contains(string(cpu), " hypervisor") && st.BTF != "ignored" {
		t.Errorf("BTF %q under a hypervisor, which ignores it (ran %d block steps)", st.BTF, st.BlockSteps)
	}
	// Until BTF is known each thread's next step is a probe; a probe that a
	// signal's delivery stops before it ran tells nothing and is made
	// again. After that the session single-steps.
	if st.BTF == "ignored" && st.BlockSteps > uint64(st.Traced)+st.Signals {
		t.Errorf("%d block steps for %d threads and %d signals: after BTF was found ignored the session must single-step", st.BlockSteps, st.Traced, st.Signals)
	}
}
