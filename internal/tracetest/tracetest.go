// Package tracetest sets up end-to-end tests of the trace facility: it
// builds swtrace and pitraced from this tree (and the bundled example) into
// a test directory, points them at a private daemon socket, and cleans up
// the daemon afterwards. Tests that use it need root and skip otherwise.
package tracetest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"perfinsp/internal/testenv"
)

// Env is one test's facility: binaries, a private socket and a work directory.
type Env struct {
	T       *testing.T
	Dir     string   // work directory (the tools run here)
	Bin     string   // the built binaries
	Swtrace string   // path of swtrace
	Burn    string   // path of the bundled example
	Environ []string // environment for the tools
}

// Root is the repository's top directory.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Setup builds swtrace, pitraced and the listed extra tools (e.g.
// "./tools/post") and the example, and returns the environment. It skips
// the test when not root.
func Setup(t *testing.T, extra ...string) *Env {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "the end-to-end tests need root (system-wide perf events): CI runs make test as root")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	args := append([]string{"build", "-o", bin + "/", "./tools/swtrace", "./daemon/cmd/pitraced"}, extra...)
	build := exec.Command("go", args...)
	build.Dir = Root()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	burn := filepath.Join(bin, "cpuburn")
	if out, err := exec.Command("gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-pthread", "-o", burn, filepath.Join(Root(), "examples", "cpuburn.c")).CombinedOutput(); err != nil {
		t.Fatalf("build example: %v\n%s", err, out)
	}
	e := &Env{T: t, Dir: dir, Bin: bin, Swtrace: filepath.Join(bin, "swtrace"), Burn: burn}
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(filepath.Join(home, ".cache"), 0o700); err != nil {
		t.Fatal(err)
	}
	// The tools' state (post's symbol cache, per-user sockets) stays in
	// this test's directory: no run reads what an earlier one left.
	e.Environ = append(os.Environ(),
		"HOME="+home,
		"XDG_CACHE_HOME="+filepath.Join(home, ".cache"),
		"PERFINSP_SOCKET="+filepath.Join(dir, "run", "pitraced.sock"),
		"PERFINSP_PITRACED="+filepath.Join(bin, "pitraced"),
		"PERFINSP_BACKEND=daemon")
	t.Cleanup(e.stopDaemons)
	return e
}

// DaemonPIDs lists the daemons this environment started, oldest first.
func (e *Env) DaemonPIDs() []int {
	b, _ := os.ReadFile(filepath.Join(e.Dir, "run", "pitraced.log"))
	var out []int
	for _, m := range regexp.MustCompile(`\(pid (\d+)\)`).FindAllSubmatch(b, -1) {
		if pid, err := strconv.Atoi(string(m[1])); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// stopDaemons stops every agent this environment started: those its log
// names and any process whose command line holds the environment's
// socket (an agent started before its log line was written), and waits
// for them to go (SIGKILL after 10 s), so no test leaves one running.
func (e *Env) stopDaemons() {
	cmd := exec.Command(e.Swtrace, "free")
	cmd.Env = e.Environ
	_ = cmd.Run()
	testenv.StopAgents(filepath.Join(e.Dir, "run", "pitraced.sock"), e.DaemonPIDs()...)
}

// Sw runs swtrace and fails the test on a non-zero exit.
func (e *Env) Sw(args ...string) string {
	e.T.Helper()
	out, code := e.SwCode(args...)
	if code != 0 {
		e.T.Fatalf("swtrace %s: exit %d\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

// SwCode runs swtrace and returns its output and exit code.
func (e *Env) SwCode(args ...string) (string, int) {
	e.T.Helper()
	cmd := exec.Command(e.Swtrace, args...)
	cmd.Env = e.Environ
	cmd.Dir = e.Dir
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		e.T.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			e.T.Fatal(err)
		}
		return buf.String(), code
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		e.T.Fatalf("swtrace %s hung", strings.Join(args, " "))
	}
	return "", -1
}

// RunBurn runs the example for units of work and returns its pid and the
// pid of the child it forked.
func (e *Env) RunBurn(units int) (pid, child int) {
	e.T.Helper()
	cmd := exec.Command(e.Burn, strconv.Itoa(units))
	out, err := cmd.Output()
	if err != nil {
		e.T.Fatalf("cpuburn: %v", err)
	}
	m := regexp.MustCompile(`child (\d+)`).FindSubmatch(out)
	if m == nil {
		e.T.Fatalf("cpuburn output %q", out)
	}
	child, _ = strconv.Atoi(string(m[1]))
	return cmd.Process.Pid, child
}
