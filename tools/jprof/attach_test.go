package jprof_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"perfinsp/analysis/a2n"
	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// traceRecords is the trace's record count so far (swtrace info --json).
func traceRecords(t *testing.T, sw func(args ...string) (string, error)) uint64 {
	t.Helper()
	out, err := sw("info", "--json")
	if err != nil {
		t.Fatalf("swtrace info: %v\n%s", err, out)
	}
	var st struct {
		CPUs []struct {
			Records uint64 `json:"records"`
		} `json:"cpus"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("swtrace info --json: %v\n%s", err, out)
	}
	var n uint64
	for _, c := range st.CPUs {
		n += c.Records
	}
	return n
}

// A JVM started without the agent, its hot loop already compiled, traced
// by tprof: `jcmd PID JVMTI.agent_load libjprof.so tprof` names the code
// that exists (the JIT_LOAD records of the replay), so post names the
// JVM's ticks after the attach from the trace alone; a second attach
// names it again, "stop" turns the agent off, the JVM ends normally;
// calltree, which needs method events HotSpot offers only at start, is
// refused with a message.
func TestAttachTprof(t *testing.T) {
	root := build(t)
	need(t, "jcmd")
	dir := t.TempDir()
	env := daemonEnv(t, root, dir)
	pid, stdin, stderr, c := waitingDemo(t, root, dir, env)
	defer stdin.Close()
	agent := filepath.Join(root, "bin", "libjprof.so")
	jcmd := func(opts string) string {
		t.Helper()
		j := exec.Command("jcmd", strconv.Itoa(pid), "JVMTI.agent_load", agent, opts)
		j.Env = env
		out, err := j.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "return code: 0") {
			t.Fatalf("jcmd %d JVMTI.agent_load %s %s: %v\n%s\nthe JVM's stderr:\n%s", pid, agent, opts, err, out, stderr())
		}
		return string(out)
	}
	// Tracing from now: the ticks before the attach (unnamed: nothing has
	// named the JVM's code yet) are those of one jcmd.
	_, sw := traceOn(t, root, dir, "16M")
	// quoted: jcmd splits an unquoted argument at "="
	jcmd(`"tprof,verbose,dir=` + dir + `"`)
	// ticks after the attach: some 5 s of the machine at 1000 Hz
	deadline := time.Now().Add(3 * time.Minute)
	for start := traceRecords(t, sw); traceRecords(t, sw) < start+10000; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no 10000 records in the trace within 3 minutes of the attach")
		}
	}
	jcmd("tprof")
	jcmd("stop")
	// calltree needs method events, which HotSpot offers only at start
	j := exec.Command("jcmd", strconv.Itoa(pid), "JVMTI.agent_load", agent, "calltree")
	if out, _ := j.CombinedOutput(); strings.Contains(string(out), "return code: 0") {
		t.Errorf("calltree attached to a running JVM:\n%s", out)
	}
	stdin.Close()
	if err := c.Wait(); err != nil {
		t.Fatalf("the JVM after the attaches: %v\n%s", err, stderr())
	}
	if out, err := sw("off"); err != nil {
		t.Fatalf("swtrace off: %v\n%s", err, out)
	}
	t.Logf("the JVM's stderr:\n%s", stderr())
	if !strings.Contains(stderr(), "calltree mode needs the agent from the JVM's start") {
		t.Errorf("the refused calltree attach says nothing:\n%s", stderr())
	}
	if !strings.Contains(stderr(), "jprof: attached:") || !strings.Contains(stderr(), " 0 not") {
		t.Errorf("the agent's attach summary is missing or records were lost:\n%s", stderr())
	}
	if out, err := sw("get", "a.nrm2"); err != nil {
		t.Fatalf("swtrace get: %v\n%s", err, out)
	}

	// The replay's records: the interpreter and a compiled JProfDemo method, twice.
	f, err := nrm2.Open(filepath.Join(dir, "a.nrm2"))
	if err != nil {
		t.Fatal(err)
	}
	interp, demo := 0, 0
	_ = f.Records(func(r *trace.Record) error {
		if r.Major == trace.MajorJITLoad && r.Minor == trace.JITLoad && int(r.Field(0)) == pid {
			switch {
			case r.Str == "Interpreter":
				interp++
			case strings.HasPrefix(r.Str, "JProfDemo."):
				demo++
			}
		}
		return nil
	})
	f.Close()
	if interp < 2 || demo < 2 {
		t.Errorf("JIT_LOAD records of the JVM: %d of the interpreter, %d of JProfDemo's compiled methods; want each from both attaches", interp, demo)
	}

	// post with no perf map: the hot loop's ticks are named from the trace.
	empty := filepath.Join(dir, "nomaps")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	post := exec.Command(filepath.Join(root, "bin", "post"), "-r", filepath.Join(dir, "a.nrm2"), "-o", empty, "--perfmap-dir", empty, "--pid", strconv.Itoa(pid), "-tprof")
	if out, err := post.CombinedOutput(); err != nil {
		t.Fatalf("post: %v\n%s", err, out)
	}
	text, err := os.ReadFile(filepath.Join(empty, "tprof.out"))
	if err != nil {
		t.Fatal(err)
	}
	total, kernel, syms := tprofShares(string(text))
	named := 0
	for s, n := range syms {
		if strings.HasPrefix(s, "JProfDemo.") {
			named += n
		}
	}
	t.Logf("JProfDemo's compiled methods: %d of the JVM's %d user-mode ticks", named, total-kernel)
	if total < 300 || 2*named < total-kernel {
		t.Errorf("JProfDemo's methods have %d of the JVM's %d user-mode ticks: want the hot loop's, named:\n%.3000s", named, total-kernel, text)
	}

	// The attach started the Java stack sampler too: its file holds
	// samples whose running frame is JProfDemo's (the hot loop).
	b, err := os.ReadFile(filepath.Join(dir, "jprof-"+strconv.Itoa(pid)+".jstk"))
	if err != nil {
		t.Fatalf("the attached agent's Java stacks: %v", err)
	}
	js, err := a2n.ParseJavaStacks(b)
	if err != nil {
		t.Fatalf("the attached agent's Java stacks: %v", err)
	}
	samples, demo := 0, 0
	for _, tid := range js.Threads() {
		for _, s := range js.Samples(tid) {
			samples++
			if len(s.Frames) > 0 && strings.HasPrefix(js.Methods[s.Frames[0]], "JProfDemo.") {
				demo++
			}
		}
	}
	t.Logf("Java stacks sampled after the attach: %d, %d running JProfDemo's methods", samples, demo)
	if 2*demo < samples || samples < 20 {
		t.Errorf("Java stacks after the attach: %d samples, %d in JProfDemo's methods: want most of some", samples, demo)
	}
}
