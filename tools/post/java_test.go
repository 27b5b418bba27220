package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"perfinsp/internal/testenv"
	"perfinsp/internal/tracetest"
)

// TestJavaPerfMap traces a real Java program, asks the JVM for its perf map
// (jcmd PID Compiler.perfmap) and checks that post names the hot JIT-compiled
// method.
func TestJavaPerfMap(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: tracing needs root")
	}
	for _, tool := range []string{"java", "javac", "jcmd"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, "%s is missing: scripts/deps/post.txt installs openjdk-17-jdk-headless", tool)
		}
	}
	e := tracetest.Setup(t)
	dir, sw := e.Dir, e.Sw
	if out, err := exec.Command("javac", "-d", dir, "testdata/Hot.java").CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	sw("init", "-t", "8M")
	sw("enable", "tprof")
	sw("setrate", "1000")
	sw("on")
	java := exec.Command("java", "-XX:CompileCommand=quiet", "-XX:CompileCommand=dontinline,Hot::spin", "-cp", dir, "Hot", "1500", "5000")
	stdout, _ := java.StdoutPipe()
	if err := java.Start(); err != nil {
		t.Fatal(err)
	}
	defer java.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready") {
		t.Fatalf("java: %q %v", line, err)
	}
	pid := java.Process.Pid
	if out, err := exec.Command("jcmd", strconv.Itoa(pid), "Compiler.perfmap").CombinedOutput(); err != nil {
		t.Fatalf("jcmd Compiler.perfmap: %v\n%s", err, out)
	}
	mapFile := filepath.Join("/tmp", "perf-"+strconv.Itoa(pid)+".map")
	defer os.Remove(mapFile)
	sw("off")
	sw("get", "java.nrm2")
	java.Process.Kill()
	java.Wait()
	if _, errs, code := runPost(t, dir, "-r", filepath.Join(dir, "java.nrm2"), "--folded", filepath.Join(dir, "j.folded")); code != 0 {
		t.Fatal(errs)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "j.folded"))
	label := "(pid " + strconv.Itoa(pid) + ");"
	var top string
	var topN, total int
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, label) {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		n, _ := strconv.Atoi(l[i+1:])
		total += n
		if n > topN {
			topN, top = n, l[:i]
		}
	}
	if total < 300 || !strings.HasSuffix(top, ";JIT;long Hot.spin(long)") {
		t.Fatalf("the java process's top symbol is %q (%d of %d ticks), want the JIT-compiled Hot.spin", top, topN, total)
	}
	t.Logf("java: %s has %d of %d ticks", top, topN, total)
}
