package cliutil

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Every tool built with the build's version string answers --version with
// it (and nothing on stderr), and a wrong option with one line.
func TestEveryToolVersion(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	bin := t.TempDir()
	const v = "v0-cliutil-test"
	build := exec.Command("go", "build", "-ldflags", "-X perfinsp/internal/cliutil.version="+v, "-o", bin+"/", "./tools/...", "./daemon/cmd/pitraced")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./tools/...: %v\n%s", err, out)
	}
	for _, tool := range []string{"swtrace", "post", "ptt", "hotspot", "hookit", "msr", "mpevt", "cpi", "rtdriver", "jprof", "pitraced"} {
		var stdout, stderr strings.Builder
		c := exec.Command(filepath.Join(bin, tool), "--version")
		c.Stdout, c.Stderr = &stdout, &stderr
		if err := c.Run(); err != nil || stdout.String() != tool+" (perfinsp) "+v+"\n" || stderr.Len() != 0 {
			t.Errorf("%s --version: %v, stdout %q, stderr %q", tool, err, stdout.String(), stderr.String())
		}
		stdout.Reset()
		stderr.Reset()
		if sub := firstCommand[tool]; sub != nil {
			c = exec.Command(filepath.Join(bin, tool), append(sub, "--version")...)
			c.Stdout, c.Stderr = &stdout, &stderr
			if err := c.Run(); err != nil || stdout.String() != tool+" (perfinsp) "+v+"\n" || stderr.Len() != 0 {
				t.Errorf("%s %s --version: %v, stdout %q, stderr %q", tool, strings.Join(sub, " "), err, stdout.String(), stderr.String())
			}
			stdout.Reset()
			stderr.Reset()
		}
		c = exec.Command(filepath.Join(bin, tool), "--no-such-option-here")
		c.Stdout, c.Stderr = &stdout, &stderr
		err := c.Run()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || strings.Count(stderr.String(), "\n") != 1 ||
			!strings.Contains(stderr.String(), tool+" --help for more") || stdout.Len() != 0 {
			t.Errorf("%s --no-such-option-here: %v, stdout %q, stderr %q: want exit 2 and one line", tool, err, stdout.String(), stderr.String())
		}
	}
}

// firstCommand is a command of each tool that has commands, one that
// would change something if run: --version must stop it.
var firstCommand = map[string][]string{
	"swtrace": {"init"},
	"ptt":     {"off"},
	"hookit":  {"report"},
}

// make build stamps the build's version into every Go program it links,
// the daemon included (built without it, pitraced --version said
// "unknown (built without version information)" where GOFLAGS has
// -buildvcs=false).
func TestMakeBuildStampsVersion(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	const v = "v0-make-test"
	c := exec.Command("make", "-n", "--no-print-directory", "build", "static", "VERSION="+v)
	c.Dir = root
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n build static: %v\n%s", err, out)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.Contains(line, "go build ") {
			continue
		}
		n++
		if !strings.Contains(line, "-X perfinsp/internal/cliutil.version="+v) {
			t.Errorf("a go build without the version: %s", line)
		}
	}
	if n < 3 {
		t.Errorf("make -n build static printed %d go build lines, want the tools', the daemon's and the static ones:\n%s", n, out)
	}
}
