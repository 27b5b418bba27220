package main

// The root daemon against an unprivileged member of its --group: every way
// the daemon could be made to act on a path, a file or a trace the member
// could not touch itself, and the ways to take it down.

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"perfinsp/format/nrm2"
	"perfinsp/internal/daemonproto"
	"perfinsp/internal/testenv"
	"perfinsp/internal/tracetest"
)

const (
	secGroup = "perfinsp-sectest"
	nobody   = 65534
)

type secEnv struct {
	*tracetest.Env
	gid    int
	pub    string // a directory the member may write (like /tmp)
	victim string // a root-owned file the member must not change
	fi     os.FileInfo
	sum    []byte
}

// setupSec starts the daemon as root with --group and makes a root-owned
// victim file and a world-writable directory.
func setupSec(t *testing.T, daemonArgs ...string) *secEnv {
	e := tracetest.Setup(t)
	if out, err := exec.Command("getent", "group", secGroup).Output(); err != nil || len(out) == 0 {
		if out, err := exec.Command("groupadd", "-f", secGroup).CombinedOutput(); err != nil {
			t.Fatalf("groupadd: %v %s", err, out)
		}
	}
	out, err := exec.Command("getent", "group", secGroup).Output()
	if err != nil {
		t.Fatalf("getent: %v", err)
	}
	gid, _ := strconv.Atoi(strings.Split(string(out), ":")[2])
	// The test\'s temp dir must be reachable by nobody to run the binary.
	testenv.OpenPathTo(t, e.Dir)
	s := &secEnv{Env: e, gid: gid, pub: filepath.Join(e.Dir, "pub")}
	if err := os.Mkdir(s.pub, 0o1777); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(s.pub, 0o1777)
	s.victim = filepath.Join(e.Dir, "victim")
	if err := os.WriteFile(s.victim, []byte("root's secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	_ = os.Chtimes(s.victim, old, old)
	s.fi, _ = os.Stat(s.victim)
	s.sum, _ = os.ReadFile(s.victim)
	sock := filepath.Join(e.Dir, "run", "pitraced.sock")
	args := append([]string{"--socket", sock, "--group", secGroup}, daemonArgs...)
	d := exec.Command(filepath.Join(e.Bin, "pitraced"), args...)
	d.Env = e.Environ
	var logb bytes.Buffer
	d.Stdout, d.Stderr = &logb, &logb
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Process.Kill(); _ = d.Wait(); t.Logf("daemon log:\n%s", logb.String()) })
	deadline := time.Now().Add(5 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not listen")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return s
}

// member runs swtrace as uid nobody in the daemon's group.
func (s *secEnv) member(args ...string) (string, int) {
	s.T.Helper()
	full := append([]string{"--reuid=" + strconv.Itoa(nobody), "--regid=" + strconv.Itoa(s.gid), "--groups=" + strconv.Itoa(s.gid), s.Swtrace}, args...)
	cmd := exec.Command("setpriv", full...)
	cmd.Env = s.Environ
	cmd.Dir = s.pub
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		s.T.Fatalf("swtrace %v as a member hung", args)
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		s.T.Fatal(err)
	}
	return string(out), code
}

func (s *secEnv) mustFail(want string, args ...string) {
	s.T.Helper()
	out, code := s.member(args...)
	if code == 0 || !strings.Contains(out, want) {
		s.T.Fatalf("swtrace %v as a member: exit %d, want failure with %q:\n%s", args, code, want, out)
	}
}

func (s *secEnv) memberOK(args ...string) string {
	s.T.Helper()
	out, code := s.member(args...)
	if code != 0 {
		s.T.Fatalf("swtrace %v as a member: exit %d\n%s", args, code, out)
	}
	return out
}

// victimUnchanged checks content, size, owner and mtime of the victim.
func (s *secEnv) victimUnchanged() {
	s.T.Helper()
	fi, err := os.Lstat(s.victim)
	if err != nil {
		s.T.Fatal(err)
	}
	b, _ := os.ReadFile(s.victim)
	st, st0 := fi.Sys().(*syscall.Stat_t), s.fi.Sys().(*syscall.Stat_t)
	if !bytes.Equal(b, s.sum) || fi.Size() != s.fi.Size() || st.Uid != st0.Uid || st.Gid != st0.Gid || !fi.ModTime().Equal(s.fi.ModTime()) {
		s.T.Fatalf("the root-owned file changed: size %d uid %d mtime %v, content %q", fi.Size(), st.Uid, fi.ModTime(), b)
	}
}

func TestMemberCannotWriteRootFiles(t *testing.T) {
	s := setupSec(t)
	s.memberOK("init", "-t", "64K", "-m", "64K")
	s.memberOK("on")
	s.memberOK("off")
	// get straight to the root-owned file, and through a planted symlink
	s.mustFail("permission denied", "get", s.victim)
	link := filepath.Join(s.pub, "link.nrm2")
	if err := os.Symlink(s.victim, link); err != nil {
		t.Fatal(err)
	}
	s.mustFail("symbolic link", "get", link)
	// get to a FIFO: refused at once, and the daemon is not blocked
	fifo := filepath.Join(s.pub, "fifo")
	if err := syscall.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.mustFail("not a regular file", "get", fifo)
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("get to a FIFO took %v", el)
	}
	s.Sw("info") // root still gets answers
	// the member's own trace, in the member's own file, mode 0600
	s.memberOK("get", "mine.nrm2")
	fi, err := os.Stat(filepath.Join(s.pub, "mine.nrm2"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != nobody || fi.Mode().Perm() != 0o600 {
		t.Fatalf("trace file owner %d mode %o, want %d and 0600", st.Uid, fi.Mode().Perm(), nobody)
	}
	// cont -f the root file, or a link to it
	s.mustFail("permission denied", "mode", "cont", "-f", s.victim)
	s.mustFail("symbolic link", "mode", "cont", "-f", link)
	s.victimUnchanged()
}

// A stream file the member swaps for a link after on is never read back by
// path: get copies what the daemon wrote through its own descriptor.
func TestStreamFileSwapIsHarmless(t *testing.T) {
	s := setupSec(t)
	stream := filepath.Join(s.pub, "stream.nrm2")
	s.memberOK("mode", "cont", "-f", stream)
	s.memberOK("init", "-t", "64K", "-m", "64K")
	s.memberOK("on")
	s.memberOK("off")
	if err := os.Rename(stream, stream+".orig"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(s.victim, stream); err != nil {
		t.Fatal(err)
	}
	s.memberOK("get", "copy.nrm2")
	b, err := os.ReadFile(filepath.Join(s.pub, "copy.nrm2"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("root's secret")) {
		t.Fatal("get copied the root-owned file the stream name was swapped for")
	}
	if _, err := nrm2.Parse(b); err != nil {
		t.Fatalf("the copy is not the trace: %v", err)
	}
	s.victimUnchanged()
}

// off, get and free of a trace belong to whoever turned it on (or root);
// every change is logged with who made it.
func TestTraceBelongsToItsOwner(t *testing.T) {
	s := setupSec(t)
	s.Sw("init", "-t", "64K", "-m", "64K")
	s.Sw("on")
	s.mustFail("belongs to uid 0", "off")
	s.mustFail("belongs to uid 0", "free")
	s.Sw("off")
	s.mustFail("belongs to uid 0", "get", "stolen.nrm2")
	s.mustFail("belongs to uid 0", "free")
	s.mustFail("not written yet", "init")
	s.Sw("get", "root.nrm2")
	s.Sw("free")
	s.memberOK("on")
	s.memberOK("off")
	s.memberOK("free")

	// A trace of root's that stopped by itself (a buffer filled): the
	// member's off is refused all the same, not reported as done.
	s.Sw("init", "-t", "4K", "-m", "64K")
	s.Sw("disable", "tprof")
	s.Sw("on")
	for i := 0; !strings.Contains(s.Sw("info"), "stopped"); i++ {
		if i == 100 {
			t.Fatalf("root's 4 KB buffer never filled:\n%s", s.Sw("info"))
		}
		s.SwCode("hook", "0x100", "1", "-s", strings.Repeat("x", 200)) // refused once tracing stopped
	}
	s.mustFail("belongs to uid 0", "off")
	s.Sw("off")
}

// A flood of connections, an endless request line and a stopped daemon:
// the daemon survives the first two and the client reports the third in
// seconds.
func TestDaemonSurvivesAbuse(t *testing.T) {
	s := setupSec(t)
	sock := filepath.Join(s.Dir, "run", "pitraced.sock")
	s.Sw("on")
	var conns []net.Conn
	refused := 0
	for i := 0; i < 300; i++ {
		c, err := net.Dial("unix", sock)
		if err != nil {
			refused++
			continue
		}
		conns = append(conns, c)
	}
	// A 4 MB request line (no newline): cut off, not buffered.
	c, err := net.Dial("unix", sock)
	if err == nil {
		big := bytes.Repeat([]byte("x"), 1<<20)
		for i := 0; i < 4; i++ {
			if _, err := c.Write(big); err != nil {
				break
			}
		}
		c.Close()
	}
	// Past the per-uid cap, a connection is answered with the reason and closed.
	if len(conns) <= 64 {
		t.Fatalf("only %d connections accepted by the kernel", len(conns))
	}
	last := conns[len(conns)-1]
	_ = last.SetReadDeadline(time.Now().Add(5 * time.Second))
	msg := make([]byte, 512)
	n, _ := last.Read(msg)
	if !strings.Contains(string(msg[:n]), "too many connections") {
		t.Fatalf("the connection past the cap got %q", msg[:n])
	}
	for _, c := range conns {
		c.Close()
	}
	out := s.Sw("info")
	if !strings.Contains(out, "state: on") && !strings.Contains(out, "on") {
		t.Fatalf("after the flood: %s", out)
	}
	pid := daemonPID(t, sock)
	if rss := vmRSS(t, pid); rss > 200<<10 {
		t.Fatalf("daemon RSS %d kB after a 4 MB request line", rss)
	}
	s.Sw("off")
	s.Sw("get", "after-flood.nrm2")
	// A stopped daemon: info fails in seconds, saying so.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped daemon pid %d", pid)
	defer syscall.Kill(pid, syscall.SIGCONT)
	// kill returns before every thread has stopped: on a busy machine a
	// thread on its way to the stop could still answer the request.
	testenv.WaitFor(t, "every thread of the daemon stopped", func() bool { return testenv.AllStopped(pid) })
	cmd := exec.Command(s.Swtrace, "info")
	cmd.Env = append(s.Environ, "PERFINSP_TIMEOUT=2s")
	start := time.Now()
	o, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(o), "did not answer") {
		t.Fatalf("info against a stopped daemon: %v %s", err, o)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("info against a stopped daemon took %v", el)
	}
	t.Logf("300 connections: %d refused by the kernel backlog; the daemon kept its trace", refused)
}

func daemonPID(t *testing.T, sock string) int {
	b, err := os.ReadFile(daemonproto.StatePath(sock))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`"pid":(\d+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("state file %s", b)
	}
	pid, _ := strconv.Atoi(string(m[1]))
	return pid
}

func vmRSS(t *testing.T, pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`VmRSS:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no VmRSS")
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// A daemon killed while tracing is reported by the next swtrace. Its
// successor takes --group from root's environment (PERFINSP_GROUP), never
// from the state file: without it the notice names the lost group.
func TestKilledDaemonIsReported(t *testing.T) {
	e := tracetest.Setup(t)
	sock := filepath.Join(e.Dir, "run", "pitraced.sock")
	if out, err := exec.Command("groupadd", "-f", secGroup).CombinedOutput(); err != nil {
		t.Fatalf("groupadd: %v %s", err, out)
	}
	d := exec.Command(filepath.Join(e.Bin, "pitraced"), "--socket", sock, "--group", secGroup)
	d.Env = e.Environ
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, err := os.Stat(sock); err != nil; _, err = os.Stat(sock) {
		if time.Now().After(deadline) {
			t.Fatal("no socket")
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.Sw("on")
	_ = d.Process.Kill()
	_ = d.Wait()
	out, _ := e.SwCode("off")
	if !strings.Contains(out, "ended without shutting down") || !strings.Contains(out, "it was tracing: that trace was lost") {
		t.Fatalf("the next swtrace does not say the daemon died with its trace:\n%s", out)
	}
	if !strings.Contains(out, `it served group "`+secGroup+`"`) || !strings.Contains(out, "PERFINSP_GROUP="+secGroup) {
		t.Fatalf("the notice does not name the group the successor lacks:\n%s", out)
	}
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("the successor's socket has mode %o: a group came from the state file", fi.Mode().Perm())
	}
	// With the group in root's environment the successor serves it.
	e.Sw("on")
	pids := e.DaemonPIDs()
	dead := pids[len(pids)-1]
	_ = syscall.Kill(dead, syscall.SIGKILL)
	waitUntil(t, "the killed daemon to be gone", 10*time.Second, func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(dead) + "/stat")
		return err != nil || strings.Contains(string(b), ") Z ")
	})
	cmd := exec.Command(e.Swtrace, "free")
	cmd.Env = append(append([]string(nil), e.Environ...), "PERFINSP_GROUP="+secGroup)
	if o, err := cmd.CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(e.Dir, "run", "pitraced.log"))
		t.Fatalf("swtrace free: %v\n%s\npitraced.log:\n%s", err, o, log)
	}
	if fi, err = os.Stat(sock); err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("the successor started with PERFINSP_GROUP: %v %v", fi, err)
	}
}

// Out of descriptors (EMFILE on accept) the daemon waits, never exits: its
// trace survives, and it answers again once connections close.
func TestDaemonSurvivesEMFILE(t *testing.T) {
	e := tracetest.Setup(t)
	sock := filepath.Join(e.Dir, "run", "pitraced.sock")
	d := exec.Command("prlimit", "--nofile=40:40", filepath.Join(e.Bin, "pitraced"), "--socket", sock)
	d.Env = e.Environ
	var logb lockedBuffer
	d.Stdout, d.Stderr = &logb, &logb
	if err := d.Start(); err != nil {
		t.Fatalf("prlimit: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- d.Wait() }()
	defer func() { _ = d.Process.Kill(); t.Logf("daemon log:\n%s", logb.String()) }()
	deadline := time.Now().Add(5 * time.Second)
	for _, err := os.Stat(sock); err != nil; _, err = os.Stat(sock) {
		if time.Now().After(deadline) {
			t.Fatal("no socket")
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.Sw("init", "-t", "1M", "-m", "1M")
	e.Sw("disable", "tprof") // a busy machine's ticks would fill the buffers and stop tracing before off
	e.Sw("on")
	var conns []net.Conn
	for i := 0; i < 60; i++ { // more than the daemon's 40 descriptors
		c, err := net.Dial("unix", sock)
		if err != nil {
			break
		}
		conns = append(conns, c)
	}
	// Wait until the accept loop has hit EMFILE; the daemon must still be there.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(logb.String(), "too many open files"); {
		select {
		case err := <-exited:
			t.Fatalf("the daemon exited out of descriptors: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon never ran out of descriptors (log: %s)", logb.String())
		}
	}
	for _, c := range conns {
		c.Close()
	}
	// A busy machine's process records may fill the buffers and stop
	// tracing meanwhile: either way off is answered and the trace kept.
	out := e.Sw("off")
	if !strings.Contains(out, "tracing off") && !strings.Contains(out, "tracing had already stopped") {
		t.Fatalf("off after EMFILE: %s", out)
	}
	e.Sw("get", "emfile.nrm2")
	select {
	case err := <-exited:
		t.Fatalf("the daemon exited: %v", err)
	default:
	}
}

// lockedBuffer is a bytes.Buffer a process writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
