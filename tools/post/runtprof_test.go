package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunTprof drives scripts/run.tprof with the tools built from this tree.
func TestRunTprof(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: run.tprof needs root")
	}
	root, _ := filepath.Abs("../..")
	build := exec.Command("go", "build", "-o", filepath.Join(root, "bin")+"/", "./tools/swtrace", "./tools/post", "./daemon/cmd/pitraced")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	burn := filepath.Join(dir, "cpuburn")
	if out, err := exec.Command("gcc", "-O2", "-g", "-pthread", "-o", burn, filepath.Join(root, "examples", "cpuburn.c")).CombinedOutput(); err != nil {
		t.Fatalf("build example: %v\n%s", err, out)
	}
	env := append(os.Environ(), "PERFINSP_SOCKET="+filepath.Join(dir, "pitraced.sock"), "PERFINSP_BACKEND=daemon")
	defer func() {
		c := exec.Command(filepath.Join(root, "bin", "swtrace"), "free")
		c.Env = env
		c.Run()
		exec.Command("pkill", "-f", "pitraced --socket "+filepath.Join(dir, "pitraced.sock")).Run()
	}()
	script := filepath.Join(root, "scripts", "run.tprof")
	runIt := func(args ...string) (string, int) {
		c := exec.Command(script, args...)
		c.Env, c.Dir = env, dir
		out, err := c.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	out, code := runIt("--", burn, "100")
	if code != 0 {
		t.Fatalf("run.tprof: exit %d\n%s", code, out)
	}
	if !strings.Contains(out, "heavy") || !strings.Contains(out, "top modules and symbols") {
		t.Fatalf("run.tprof did not print the top rows:\n%s", out)
	}
	for _, f := range []string{"swtrace.nrm2", "tprof.out"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("%s not left in the current directory", f)
		}
	}
	if out, code := runIt("--", "sh", "-c", "exit 7"); code != 7 {
		t.Fatalf("the command's exit code 7 was not preserved: %d\n%s", code, out)
	}
	if out, code := runIt(); code == 0 || !strings.Contains(out, "give a command") {
		t.Fatalf("no command: exit %d\n%s", code, out)
	}
	// Busy: somebody else is tracing.
	sw := exec.Command(filepath.Join(root, "bin", "swtrace"), "on", "--discard")
	sw.Env, sw.Dir = env, dir
	if o, err := sw.CombinedOutput(); err != nil {
		t.Fatalf("swtrace on: %v %s", err, o)
	}
	out, code = runIt("--", "true")
	if code == 0 || !strings.Contains(out, "busy") {
		t.Fatalf("busy facility: exit %d\n%s", code, out)
	}
	off := exec.Command(filepath.Join(root, "bin", "swtrace"), "off")
	off.Env = env
	off.Run()
	// Not root.
	np := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", script, "--", "true")
	np.Env = env
	o, err := np.CombinedOutput()
	if err == nil || !strings.Contains(string(o), "needs root") {
		t.Fatalf("non-root: %v\n%s", err, o)
	}
}
