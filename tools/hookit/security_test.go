package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"perfinsp/internal/testenv"
)

// hostileDir is a directory anyone can write (mode 0777, as a shared
// directory is) where another user planted links named like the reports
// to victim, a file holding "precious".
func hostileDir(t *testing.T) (dir, victim string) {
	t.Helper()
	base := t.TempDir()
	dir = filepath.Join(base, "shared")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil { // (the umask does not apply to chmod)
		t.Fatal(err)
	}
	victim = filepath.Join(base, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"log-rt", "log-gen", "callflow.folded", "callflow.pb.gz", "callflow.trace.json"} {
		if err := os.Symlink(victim, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	return dir, victim
}

func checkVictim(t *testing.T, victim string) {
	t.Helper()
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious" {
		t.Fatalf("the victim file was written through a planted link: %q %v", b, err)
	}
}

// hookitFiles lists the runtime's files in dir.
func hookitFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "hookit-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestOutputDirectoryOfOthersRefused: run.hookit, the runtime (preloaded,
// as an agent's dir= is the same code) and hookit report refuse a
// directory others can write, in one line saying why, and write nothing
// there (the planted links are never followed).
func TestOutputDirectoryOfOthersRefused(t *testing.T) {
	r := setup(t)
	dir, victim := hostileDir(t)
	out, err := exec.Command(filepath.Join(r, "scripts/run.hookit"), "-o", dir, "--", filepath.Join(r, "bin/callflow"), "10").CombinedOutput()
	if err == nil || !bytes.Contains(out, []byte("writable by group or others")) {
		t.Errorf("run.hookit -o a world-writable directory: %v\n%s", err, out)
	}
	checkVictim(t, victim)

	cmd := exec.Command(filepath.Join(r, "bin/callflow"), "10")
	cmd.Env = append(os.Environ(), "HOOKIT_DIR="+dir, "LD_PRELOAD="+filepath.Join(r, "bin/libhookit.so"))
	out, err = cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("hookit: "+dir+" is writable by others")) {
		t.Errorf("the runtime in a world-writable directory: %v\n%s", err, out)
	}
	if f := hookitFiles(t, dir); len(f) != 0 {
		t.Errorf("the runtime wrote %v in a world-writable directory", f)
	}

	good := runHookit(t, "--", filepath.Join(r, "bin/callflow"), "10")
	out, err = exec.Command(filepath.Join(r, "bin/hookit"), "report", "-i", good, "-o", dir, "--chrome").CombinedOutput()
	if err == nil || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 || !bytes.Contains(out, []byte("writable by others")) {
		t.Errorf("hookit report -o a world-writable directory: %v\n%s", err, out)
	}
	checkVictim(t, victim)

	// Another user's directory, closed to others but not the caller's.
	if os.Geteuid() != 0 {
		t.Log("not root: the directory of another user is not tried (CI runs as root)")
		return
	}
	theirs := filepath.Join(t.TempDir(), "theirs")
	if err := os.Mkdir(theirs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(filepath.Join(r, "bin/callflow"), "10")
	cmd.Env = append(os.Environ(), "HOOKIT_DIR="+theirs, "LD_PRELOAD="+filepath.Join(r, "bin/libhookit.so"))
	if out, err := cmd.CombinedOutput(); err != nil || !bytes.Contains(out, []byte("belongs to uid 65534, not to you")) {
		t.Errorf("the runtime in another user's directory: %v\n%s", err, out)
	}
	if f := hookitFiles(t, theirs); len(f) != 0 {
		t.Errorf("the runtime wrote %v in another user's directory", f)
	}
	out, err = exec.Command(filepath.Join(r, "bin/hookit"), "report", "-i", good, "-o", theirs, "--chrome").CombinedOutput()
	if err == nil || !bytes.Contains(out, []byte("belongs to uid 65534")) {
		t.Errorf("hookit report -o another user's directory: %v\n%s", err, out)
	}
}

// TestOutputModes: under umask 000, run.hookit's directory is 0700 and
// every file in it (thread files, .info, .maps, .names, the reports)
// 0600, as traces are.
func TestOutputModes(t *testing.T) {
	r := setup(t)
	dir := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command("sh", "-c", `umask 000 && exec "$@"`, "sh", filepath.Join(r, "scripts/run.hookit"), "-o", dir, "-t", "--", filepath.Join(r, "bin/callflow"), "10")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("run.hookit: %v\n%s", err, out)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v %v, want mode 0700", dir, fi.Mode(), err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", e.Name(), fi.Mode().Perm())
		}
		kinds[filepath.Ext(e.Name())] = true
	}
	for _, k := range []string{".bin", ".info", ".maps", ".names", ".threads", ".gz", ".folded", ".json", ""} {
		if !kinds[k] {
			t.Errorf("no %q file in %s to check: %v", k, dir, ents)
		}
	}
}

// TestControlSocketPeerAndDeadline: the control socket is 0600; a
// connection that says nothing holds the runtime's control thread no
// longer than its deadline (rtdriver is answered meanwhile); and another
// user who reaches the socket (mode 0666 and a searchable directory, as
// a umask of 000 used to leave it) is refused by the peer check.
func TestControlSocketPeerAndDeadline(t *testing.T) {
	setup(t)
	dir := t.TempDir()
	cmd := spin(t, dir, "HOOKIT_START=off")
	pid := cmd.Process.Pid
	sock := filepath.Join(dir, fmt.Sprintf("hookit-%d.sock", pid))
	testenv.WaitFor(t, "the control socket", func() bool { _, err := os.Stat(sock); return err == nil })
	silent, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	start := time.Now()
	out, err := exec.Command(filepath.Join(root, "bin/rtdriver"), "-d", dir, "-p", strconv.Itoa(pid), "--timeout", "15s", "start").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "ok start") {
		t.Fatalf("rtdriver start behind a silent connection: %v after %v\n%s", err, time.Since(start), out)
	}
	t.Logf("answered %v after a silent connection", time.Since(start))
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v, want mode 0600", sock, fi.Mode(), err)
	}

	if os.Geteuid() != 0 {
		t.Log("not root: the peer check against another user is not tried (CI runs as root)")
		return
	}
	// Another user who can reach the socket.
	bin := t.TempDir()
	rt, err := os.ReadFile(filepath.Join(root, "bin/rtdriver"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "rtdriver"), rt, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.OpenPathTo(t, bin)
	testenv.OpenPathTo(t, dir)
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	other := exec.Command(filepath.Join(bin, "rtdriver"), "-d", dir, "-p", strconv.Itoa(pid), "reset")
	other.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err = other.CombinedOutput()
	if err == nil || !bytes.Contains(out, []byte("another user's process")) {
		t.Fatalf("rtdriver reset by another user: %v\n%s", err, out)
	}
}

// TestRtdriverChecksTheServer: rtdriver sends nothing to, and believes
// nothing from, a socket named for a program that another process serves
// (one planted in a shared directory, answering "ok").
func TestRtdriverChecksTheServer(t *testing.T) {
	setup(t)
	dir := t.TempDir()
	victim := os.Getpid() + 100000 // a pid the socket's name claims, not this process's
	ln, err := net.Listen("unix", filepath.Join(dir, fmt.Sprintf("hookit-%d.sock", victim)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			b := make([]byte, 64)
			n, _ := c.Read(b)
			got <- string(b[:n])
			c.Write([]byte("ok shutdown\n"))
			c.Close()
		}
	}()
	for _, args := range [][]string{{"-p", strconv.Itoa(victim)}, nil} {
		out, err := exec.Command(filepath.Join(root, "bin/rtdriver"), append(append([]string{"-d", dir}, args...), "shutdown")...).CombinedOutput()
		if err == nil || !bytes.Contains(out, []byte(fmt.Sprintf("is served by pid %d, not by pid %d", os.Getpid(), victim))) {
			t.Fatalf("rtdriver %v against a planted socket: %v\n%s", args, err, out)
		}
	}
	for i := 0; i < 2; i++ { // what each of the two connections carried
		select {
		case cmd := <-got:
			if cmd != "" {
				t.Fatalf("the planted socket was sent %q", cmd)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("rtdriver's connections did not end")
		}
	}
}

// TestObserverLeavesHeapAndEnvironment: a program whose output depends on
// its heap and its environment prints the same under libhookit as without
// it. The heap is compared with the program beside a library that only has
// thread-local storage and one thread (glibc takes each thread's TLS table
// from the heap, one slot per such library: the runtime's only footprint
// there); the environment with the program alone (HOOKIT_* and the
// runtime's LD_PRELOAD entry are taken out).
func TestObserverLeavesHeapAndEnvironment(t *testing.T) {
	r := setup(t)
	tmp := t.TempDir()
	prog, tls := filepath.Join(tmp, "heapenv"), filepath.Join(tmp, "libtlsthread.so")
	for _, c := range [][]string{
		{"-O2", "-finstrument-functions", "-pthread", "-o", prog, "testdata/heapenv.c"},
		{"-O2", "-shared", "-fPIC", "-pthread", "-o", tls, "testdata/tlsthread.c"},
	} {
		if out, err := exec.Command("gcc", c...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", c, err, out)
		}
	}
	run := func(env ...string) (heap, environ string) {
		t.Helper()
		cmd := exec.Command(prog)
		cmd.Env = append([]string{"PATH=/usr/bin:/bin", "A=1"}, env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %v: %v", prog, env, err)
		}
		for _, l := range strings.SplitAfter(string(out), "\n") {
			if strings.HasPrefix(l, "env ") {
				environ += l
			} else {
				heap += l
			}
		}
		return heap, environ
	}
	_, envAlone := run()
	heapBeside, _ := run("LD_PRELOAD=" + tls)
	dir := filepath.Join(tmp, "hk")
	heapHk, envHk := run("HOOKIT_DIR="+dir, "HOOKIT_METRIC=task-clock", "LD_PRELOAD="+filepath.Join(r, "bin/libhookit.so"))
	if envHk != envAlone {
		t.Errorf("the environment the program sees:\n%s\nwant, as without libhookit:\n%s", envHk, envAlone)
	}
	if heapHk != heapBeside {
		t.Errorf("the heap under libhookit:\n%s\nwant, as beside any library with TLS and a thread:\n%s", heapHk, heapBeside)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "hookit-*-*.bin")); len(m) != 2 {
		t.Errorf("%d thread files, want 2: the runtime recorded the run", len(m))
	}
}
