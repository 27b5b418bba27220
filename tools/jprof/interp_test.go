package jprof_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// modSymShares parses the Module_Symbol section of tprof.out: the ticks of
// each symbol under each module ("MOD\x00SYM"), and of each module.
func modSymShares(text string) (mods, syms map[string]int) {
	mods, syms = map[string]int{}, map[string]int{}
	section, mod := "", ""
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, ")) ") {
			section = strings.TrimPrefix(l, ")) ")
			continue
		}
		if section != "Module_Symbol" {
			continue
		}
		m := rowRE.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[2])
		switch m[1] {
		case "MOD":
			mod = strings.TrimSpace(m[4])
			mods[mod] += n
		case "SYM":
			syms[mod+"\x00"+strings.TrimSpace(m[4])] += n
		}
	}
	return mods, syms
}

// hotLoopRun is run.tprof at HZ of perf record (cpu-clock, HZ: perf
// records the same JVM from its start to its end) of java FLAGS
// -agentpath:libjprof.so=OPTS,verbose,dir=DIR HotLoop SECS wait; once the
// loop is done, jcmd Compiler.perfmap writes the JVM's perf map for perf.
// It returns the JVM's pid and the agent's stderr.
func hotLoopRun(t *testing.T, root, dir, hz, opts, secs string, flags ...string) (int, string) {
	t.Helper()
	env := daemonEnv(t, root, dir)
	perfData := filepath.Join(dir, "perf.data")
	args := []string{"-r", hz, "-o", dir, "--", "perf", "record", "-q", "-e", "cpu-clock", "-F", hz, "-o", perfData, "--", "java"}
	args = append(args, flags...)
	args = append(args, "-agentpath:"+filepath.Join(root, "bin", "libjprof.so")+"="+opts+",verbose,dir="+dir, "-cp", filepath.Join(root, "build", "java"), "HotLoop", secs, "wait")
	cmd := exec.Command(filepath.Join(root, "scripts", "run.tprof"), args...)
	cmd.Env, cmd.Dir = env, dir
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	wait := func(prefix string) string {
		t.Helper()
		timeout := time.After(3 * time.Minute)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("run.tprof ended before %q:\n%s", prefix, stderr.String())
				}
				if strings.HasPrefix(l, prefix) {
					return l
				}
			case <-timeout:
				t.Fatalf("no %q from run.tprof:\n%s", prefix, stderr.String())
			}
		}
	}
	pid, _ := strconv.Atoi(strings.TrimPrefix(wait("pid "), "pid "))
	wait("HotLoop done")
	perfMap := fmt.Sprintf("/tmp/perf-%d.map", pid)
	t.Cleanup(func() { os.Remove(perfMap) })
	if out, err := exec.Command("jcmd", strconv.Itoa(pid), "Compiler.perfmap").CombinedOutput(); err != nil {
		t.Fatalf("jcmd: %v\n%s", err, out)
	}
	stdin.Close()
	for range lines {
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("run.tprof: %v\n%s", err, stderr.String())
	}
	return pid, stderr.String()
}

// perfSyms is perf report's share (%) of each symbol of the JVM's process
// (the perf map names JIT code and stubs).
func perfSyms(t *testing.T, perfData string, pid int) map[string]float64 {
	t.Helper()
	out, err := exec.Command("perf", "report", "-i", perfData, "--pid", strconv.Itoa(pid), "--stdio", "--sort", "sym", "-F", "overhead,sym").Output()
	if err != nil {
		t.Fatalf("perf report: %v", err)
	}
	re := regexp.MustCompile(`^\s*([\d.]+)%\s+\[[.k]\]\s+(.*?)\s*$`)
	m := map[string]float64{}
	for _, l := range strings.Split(string(out), "\n") {
		if f := re.FindStringSubmatch(l); f != nil {
			v, _ := strconv.ParseFloat(f[1], 64)
			m[f[2]] += v
		}
	}
	return m
}

// Ticks taken in HotSpot's interpreter are named by the Java method it
// runs (the agent's sampled Java stacks, matched by thread and time), for
// a JVM that interprets everything (-Xint) and for one run as people run
// it (tiered JIT) whose hot method the JIT is told to leave alone: post
// gives at least 80 % of the JVM's user-mode ticks to named Java methods,
// HotLoop.spin first; perf with the JVM's perf map, recording the same
// JVM, has those ticks in the unnamed interpreter.
func TestTprofNamesInterpreted(t *testing.T) {
	root := build(t)
	need(t, "perf", "jcmd")
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"Xint", []string{"-Xint"}},
		{"excluded", []string{"-XX:CompileCommand=quiet", "-XX:CompileCommand=exclude,HotLoop::spin"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			pid, stderr := hotLoopRun(t, root, dir, "1000", "tprof", "5", tc.flags...)
			m := regexp.MustCompile(`jprof: (\d+) Java stacks sampled, (\d+) not walkable, (\d+) dropped`).FindStringSubmatch(stderr)
			if m == nil {
				t.Fatalf("no sampler summary from the agent:\n%s", stderr)
			}
			if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("jprof-%d.jstk", pid))); err != nil {
				t.Fatalf("the agent's Java stacks: %v", err)
			}
			// post with the agent's Java stacks (in dir), and without
			// (an empty perf-map directory): the same trace
			post := func(name, mapDir string) string {
				t.Helper()
				out := filepath.Join(dir, name)
				if err := os.MkdirAll(out, 0o755); err != nil {
					t.Fatal(err)
				}
				c := exec.Command(filepath.Join(root, "bin", "post"), "-r", filepath.Join(dir, "swtrace.nrm2"), "-o", out,
					"--perfmap-dir", mapDir, "--pid", strconv.Itoa(pid), "-tprof")
				if o, err := c.CombinedOutput(); err != nil {
					t.Fatalf("post: %v\n%s", err, o)
				}
				text, err := os.ReadFile(filepath.Join(out, "tprof.out"))
				if err != nil {
					t.Fatal(err)
				}
				return string(text)
			}
			text := post("post", dir)
			_, without := modSymShares(post("nostacks", filepath.Join(dir, "nostacks")))
			mods, syms := modSymShares(text)
			total, kernel := 0, mods["[kernel]"]
			for _, n := range mods {
				total += n
			}
			user := total - kernel
			named := mods["Interpreter"] // only named Java methods are in this module
			type row struct {
				name string
				n    int
			}
			var rows []row
			for k, n := range syms {
				if !strings.HasPrefix(k, "[kernel]\x00") {
					rows = append(rows, row{k, n})
				}
			}
			sort.Slice(rows, func(i, j int) bool { return rows[i].n > rows[j].n })
			spin := syms["Interpreter\x00HotLoop.spin"]
			perf := perfSyms(t, filepath.Join(dir, "perf.data"), pid)
			perfInterp, perfSpin := perf["Interpreter"], perf["HotLoop::spin"]+perf["HotLoop.spin"]+perf["long HotLoop.spin(long)"]
			t.Logf("agent: %s samples, %s not walkable, %s dropped", m[1], m[2], m[3])
			t.Logf("post: %d of the JVM's %d user-mode ticks (%d in all) named Java methods in the interpreter (%.1f %%), HotLoop.spin %d (%.1f %%); "+
				"perf + perf map, same JVM: Interpreter %.1f %%, HotLoop.spin %.1f %% of its samples",
				named, user, total, 100*float64(named)/float64(max(user, 1)), spin, 100*float64(spin)/float64(max(user, 1)), perfInterp, perfSpin)
			// HotLoop spins for 5 s of wall-clock time: beside a busy host
			// the JVM may get a quarter of a CPU (some 1000 ticks)
			t.Logf("post without the Java stacks: Interpreter %d, HotLoop.spin %d ticks", without["JIT\x00Interpreter"], without["Interpreter\x00HotLoop.spin"])
			if user < 300 {
				t.Fatalf("only %d user-mode ticks of the JVM:\n%.3000s", user, text)
			}
			if 100*named < 80*user {
				t.Errorf("named Java methods have %d of the JVM's %d user-mode ticks: want at least 80 %%\n%.3000s", named, user, text)
			}
			if len(rows) == 0 || rows[0].name != "Interpreter\x00HotLoop.spin" {
				t.Errorf("the top user-mode symbol is not HotLoop.spin (interpreted):\n%.3000s", text)
			}
			if perfSpin >= 100*float64(spin)/float64(total) {
				t.Errorf("perf names HotLoop.spin as much as post (%.1f %%): the test no longer shows what it should", perfSpin)
			}
			if 2*without["JIT\x00Interpreter"] < user || without["Interpreter\x00HotLoop.spin"] != 0 {
				t.Errorf("without the Java stacks the interpreter's ticks are not 'Interpreter': the test no longer shows what it should")
			}
		})
	}
}

// Java frames inside tprof's call stacks: java -Xint StackDemo under
// run.tprof -g with the agent in tprof mode; post with the agent's Java
// stacks gives the main thread's stacks with the interpreted methods
// named (at most 3 % keep an "Interpreter" frame), each method where the
// program calls it (compute and writer right under middle), and the
// Java, native and kernel frames of a write(2) in one stack; post
// without them (the same trace) has "Interpreter" frames there.
func TestTprofStacksNameJavaFrames(t *testing.T) {
	root := build(t)
	dir := t.TempDir()
	env := daemonEnv(t, root, dir)
	cmd := exec.Command(filepath.Join(root, "scripts", "run.tprof"), "-r", "1000", "-g", "-o", dir, "--", "java", "-Xint",
		"-agentpath:"+filepath.Join(root, "bin", "libjprof.so")+"=tprof,verbose,dir="+dir, "-cp", filepath.Join(root, "build", "java"), "StackDemo", "5")
	cmd.Env, cmd.Dir = env, dir
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "StackDemo done") {
		t.Fatalf("run.tprof: %v\n%s", err, out)
	}
	// the folded stacks holding frame
	folded := func(name, mapDir, frame string) map[string]int {
		t.Helper()
		f := filepath.Join(dir, name+".folded")
		c := exec.Command(filepath.Join(root, "bin", "post"), "-r", filepath.Join(dir, "swtrace.nrm2"), "-o", t.TempDir(),
			"--perfmap-dir", mapDir, "-tprof", "--folded", f)
		if o, err := c.CombinedOutput(); err != nil {
			t.Fatalf("post: %v\n%s", err, o)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int{}
		for _, l := range strings.Split(string(b), "\n") {
			if i := strings.LastIndexByte(l, ' '); i > 0 && strings.Contains(l, ";"+frame+";") {
				n, _ := strconv.Atoi(l[i+1:])
				m[l[:i]] += n
			}
		}
		return m
	}
	// the main thread once the launcher called main (the JVM's start-up
	// runs Java code before the agent's sampler starts)
	named := folded("named", dir, "jni_CallStaticVoidMethod")
	var total, interp, compute, writer int
	var syscall string
	for st, n := range named {
		total += n
		if strings.Contains(st, ";Interpreter;") || strings.HasSuffix(st, ";Interpreter") {
			interp += n
		}
		frames := strings.Split(st, ";")
		for i, f := range frames {
			if f == "StackDemo.compute" || f == "StackDemo.writer" {
				if frames[i-1] != "StackDemo.middle" {
					t.Errorf("%s under %s: %s", f, frames[i-1], st)
				}
				if f == "StackDemo.compute" {
					compute += n
				} else {
					writer += n
				}
			}
		}
		if strings.Contains(st, "StackDemo.writer;java.io.FileOutputStream.write;java.io.FileOutputStream.writeBytes;") &&
			strings.Contains(st, ";write;") && strings.HasSuffix(st, "_[k]") {
			syscall = st
		}
	}
	t.Logf("%d ticks of main: %d with an Interpreter frame, %d in compute, %d in writer; a write(2): %s",
		total, interp, compute, writer, syscall)
	if total < 100 {
		t.Fatalf("only %d ticks of main", total)
	}
	// a tick no nearby sample fits (the agent samples on its own timer;
	// a class being initialized, a call site linked) keeps its
	// Interpreter frames: a few in a hundred at most
	if 100*interp > 3*total {
		t.Errorf("%d of %d ticks of main have an Interpreter frame: want at most 3 %%", interp, total)
	}
	if compute == 0 || writer == 0 || syscall == "" {
		t.Errorf("compute %d, writer %d ticks, a write(2)'s stack %q: want both methods and a stack from Java to the kernel", compute, writer, syscall)
	}
	without := 0
	for st, n := range folded("unnamed", t.TempDir(), "jni_CallStaticVoidMethod") {
		if strings.Contains(st, ";Interpreter") {
			without += n
		}
	}
	if 2*without < total {
		t.Errorf("without the Java stacks %d ticks have Interpreter frames: the test no longer shows what it should", without)
	}
}
