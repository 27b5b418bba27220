package main

// A hostile client of the root agent: the test binary, copied where uid
// nobody can run it and started under setpriv, speaks the protocol itself
// (no swtrace checks on its side) and reports what the agent did for it.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"perfinsp/internal/daemonproto"
)

const envAttack = "PERFINSP_SECTEST_ATTACK"

func init() {
	if role := os.Getenv(envAttack); role != "" {
		if err := attack(role, os.Args[1:]); err != nil {
			fmt.Println("ATTACK-ERROR:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
}

// rawClient is one connection speaking the protocol.
type rawClient struct{ c *daemonproto.Conn }

func dialRaw() (*rawClient, error) {
	c, err := net.Dial("unix", daemonproto.SocketPath())
	if err != nil {
		return nil, err
	}
	return &rawClient{daemonproto.NewConn(c.(*net.UnixConn))}, nil
}

// call sends op and returns the daemon's error text ("" when it did it).
func (r *rawClient) call(op string, args any, files ...*os.File) (string, error) {
	req := daemonproto.Request{Op: op}
	if args != nil {
		b, _ := json.Marshal(args)
		req.Args = b
	}
	if err := r.c.Send(&req, files...); err != nil {
		return "", err
	}
	var resp daemonproto.Response
	if _, err := r.c.Receive(&resp); err != nil {
		return "", err
	}
	if !resp.OK {
		return resp.Error, nil
	}
	return "", nil
}

func (r *rawClient) must(op string, args any, files ...*os.File) error {
	msg, err := r.call(op, args, files...)
	if err == nil && msg != "" {
		err = fmt.Errorf("%s: %s", op, msg)
	}
	return err
}

// attack runs one attack and prints what happened (RESULT: lines).
func attack(role string, args []string) error {
	switch role {
	case "get-proc":
		return attackGetProc(args[0])
	case "partial":
		return attackPartial()
	case "silent":
		return attackSilent()
	case "jprof":
		return attackJProf(args[0])
	case "on-proc":
		return attackOnProc(args[0])
	}
	return fmt.Errorf("unknown attack %q", role)
}

// attackGetProc: a wrap-mode trace whose stream file (the attacker's own)
// is rewritten to "-20" after off, then got into the attacker's own
// /proc/self/autogroup: only a writer with CAP_SYS_NICE may set a negative
// nice there, so the agent must never be the writer.
func attackGetProc(dir string) error {
	r, err := dialRaw()
	if err != nil {
		return err
	}
	stream := filepath.Join(dir, "stream.nrm2")
	if err := r.must(daemonproto.OpMode, daemonproto.ModeArgs{Mode: 1, File: stream}); err != nil {
		return err
	}
	if err := r.must(daemonproto.OpInit, daemonproto.InitArgs{TraceBufSize: 64 << 10, MTEBufSize: 64 << 10}); err != nil {
		return err
	}
	sf, err := os.OpenFile(stream, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if err := r.must(daemonproto.OpOn, nil, sf); err != nil {
		return err
	}
	sf.Close()
	if err := r.must(daemonproto.OpOff, nil); err != nil {
		return err
	}
	// The first get completes the stream file in place; the second copies
	// whatever the file holds by then.
	if err := r.must(daemonproto.OpGet, daemonproto.GetArgs{}); err != nil {
		return err
	}
	if err := os.WriteFile(stream, []byte("-20\n"), 0o600); err != nil {
		return err
	}
	before, _ := os.ReadFile("/proc/self/autogroup")
	target, err := os.OpenFile("/proc/self/autogroup", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	msg, err := r.call(daemonproto.OpGet, daemonproto.GetArgs{Path: "/proc/self/autogroup"}, target)
	if err != nil {
		return err
	}
	after, _ := os.ReadFile("/proc/self/autogroup")
	fmt.Printf("RESULT: refused=%q before=%q after=%q\n", msg, strings.TrimSpace(string(before)), strings.TrimSpace(string(after)))
	return nil
}

// attackOnProc: a cont-mode on whose stream descriptor is the attacker's
// own /proc/self/autogroup (the agent would write the trace's header there
// as root).
func attackOnProc(dir string) error {
	r, err := dialRaw()
	if err != nil {
		return err
	}
	if err := r.must(daemonproto.OpMode, daemonproto.ModeArgs{Mode: 2, File: filepath.Join(dir, "stream.nrm2")}); err != nil {
		return err
	}
	if err := r.must(daemonproto.OpInit, daemonproto.InitArgs{TraceBufSize: 64 << 10, MTEBufSize: 64 << 10}); err != nil {
		return err
	}
	target, err := os.OpenFile("/proc/self/autogroup", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	msg, err := r.call(daemonproto.OpOn, nil, target)
	if err != nil {
		return err
	}
	info, _ := r.call(daemonproto.OpInfo, nil)
	fmt.Printf("RESULT: refused=%q info=%q\n", msg, info)
	return nil
}

// attackPartial opens 64 connections (the per-user cap) and sends each
// all of a request but its newline (1 MB less one byte), then holds them
// until its standard input closes.
func attackPartial() error {
	big := bytes.Repeat([]byte("x"), daemonproto.MaxRequest-1)
	var conns []net.Conn
	sent, cut := 0, 0
	for i := 0; i < 64; i++ {
		c, err := net.Dial("unix", daemonproto.SocketPath())
		if err != nil {
			return err
		}
		conns = append(conns, c)
		_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		n, err := c.Write(big)
		sent += n
		if err != nil {
			cut++
		}
	}
	fmt.Printf("HELD sent=%d cut=%d\n", sent, cut)
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close()
	}
	return nil
}

// attackSilent sends the first byte of a request and nothing more, and
// reports how long the agent kept the connection open.
func attackSilent() error {
	c, err := net.Dial("unix", daemonproto.SocketPath())
	if err != nil {
		return err
	}
	defer c.Close()
	start := time.Now()
	if _, err := c.Write([]byte("{")); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	b, _ := io.ReadAll(c)
	fmt.Printf("RESULT: closed after %.1fs: %s\n", time.Since(start).Seconds(), strings.TrimSpace(string(b)))
	return nil
}

// attacker copies this test binary where nobody can run it and returns a
// command running role as uid nobody (in the agent's group when member).
func (s *secEnv) attacker(member bool, role string, args ...string) *exec.Cmd {
	s.T.Helper()
	exe, err := os.Executable()
	if err != nil {
		s.T.Fatal(err)
	}
	bin := filepath.Join(s.Dir, "bin", "attacker.test")
	if _, err := os.Stat(bin); err != nil {
		in, err := os.Open(exe)
		if err != nil {
			s.T.Fatal(err)
		}
		out, err := os.OpenFile(bin, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
		if err != nil {
			s.T.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			s.T.Fatal(err)
		}
		in.Close()
		if err := out.Close(); err != nil {
			s.T.Fatal(err)
		}
	}
	cred := []string{"--reuid=" + strconv.Itoa(nobody), "--regid=" + strconv.Itoa(nobody), "--clear-groups"}
	if member {
		cred = []string{"--reuid=" + strconv.Itoa(nobody), "--regid=" + strconv.Itoa(s.gid), "--groups=" + strconv.Itoa(s.gid)}
	}
	cmd := exec.Command("setpriv", append(append(cred, bin), args...)...)
	cmd.Env = append(append([]string(nil), s.Environ...), envAttack+"="+role)
	cmd.Dir = s.pub
	// A session of its own: its autogroup is its own too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return cmd
}

// attackRun runs an attack to its end and returns its RESULT line.
func (s *secEnv) attackRun(member bool, role string, args ...string) string {
	s.T.Helper()
	out, err := s.attacker(member, role, args...).CombinedOutput()
	if err != nil {
		s.T.Fatalf("attack %s: %v\n%s", role, err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "RESULT: ") {
			return strings.TrimPrefix(l, "RESULT: ")
		}
	}
	s.T.Fatalf("attack %s reported nothing:\n%s", role, out)
	return ""
}

// get into /proc: the agent writes the attacker's bytes nowhere but an
// ordinary file system.
func TestGetIntoProcRefused(t *testing.T) {
	s := setupSec(t)
	res := s.attackRun(true, "get-proc", s.pub)
	if !strings.Contains(res, "not an ordinary file system") || strings.Contains(res, "nice -20") {
		t.Fatalf("get into /proc/self/autogroup: %s", res)
	}
	// swtrace's own check says so before asking the agent.
	s.mustFail("not an ordinary file system", "get", "/proc/self/autogroup")
	// A plain user (not in the group) does not reach the agent at all.
	out, err := s.attacker(false, "get-proc", s.pub).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "permission denied") {
		t.Fatalf("a plain user's attack: %v\n%s", err, out)
	}
}

// on in cont mode with /proc/self/autogroup as the stream: refused, and
// tracing stays off; a plain user does not reach the agent.
func TestStreamIntoProcRefused(t *testing.T) {
	s := setupSec(t)
	res := s.attackRun(true, "on-proc", s.pub)
	if !strings.Contains(res, "not an ordinary file system") {
		t.Fatalf("on with /proc/self/autogroup as the stream: %s", res)
	}
	if out := s.Sw("info"); !strings.Contains(out, "state: initialized") {
		t.Fatalf("tracing after the refused on:\n%s", out)
	}
	out, err := s.attacker(false, "on-proc", s.pub).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "permission denied") {
		t.Fatalf("a plain user's attack: %v\n%s", err, out)
	}
}

// A file another user created for root's get (in a shared directory,
// mode 0666) is refused: its owner would keep reading root's trace. Root's
// own existing file is made 0600.
func TestGetIntoOthersFileRefused(t *testing.T) {
	s := setupSec(t)
	trap := filepath.Join(s.pub, "trap.nrm2")
	if err := os.WriteFile(trap, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(trap, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(trap, 0o666)
	s.Sw("init", "-t", "64K", "-m", "64K")
	s.Sw("on")
	s.Sw("off")
	out, code := s.SwCode("get", trap)
	if code == 0 || !strings.Contains(out, "belongs to uid 65534") {
		t.Fatalf("root's get into a file nobody created: exit %d\n%s", code, out)
	}
	if fi, err := os.Stat(trap); err != nil || fi.Size() != 0 {
		t.Fatalf("the trap file was written: %v %v", fi, err)
	}
	mine := filepath.Join(s.pub, "mine.nrm2")
	if err := os.WriteFile(mine, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s.Sw("get", mine)
	fi, err := os.Stat(mine)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || fi.Mode().Perm() != 0o600 || fi.Size() == 0 {
		t.Fatalf("root's trace file: uid %d mode %o size %d, want 0, 0600 and the trace", st.Uid, fi.Mode().Perm(), fi.Size())
	}
}

// 64 connections of one member, each holding all of a request but its
// newline: the agent holds at most MaxPendingPerUID of them, answers root
// meanwhile, and a silent request is closed at its deadline.
func TestPartialRequestsBounded(t *testing.T) {
	s := setupSec(t)
	pid := s.pid()
	rss0 := vmRSS(t, pid)
	cmd := s.attacker(true, "partial")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HELD") {
		t.Fatalf("attacker: %q %v", line, err)
	}
	rss := vmRSS(t, pid)
	s.Sw("info")
	t.Logf("%s; daemon RSS %d kB before, %d kB while held", strings.TrimSpace(line), rss0, rss)
	if rss-rss0 > 16<<10 {
		t.Fatalf("64 unfinished requests of one member hold %d kB of the daemon", rss-rss0)
	}
}

func TestSilentRequestClosedAtDeadline(t *testing.T) {
	s := setupSec(t, "--request-timeout", "2s")
	res := s.attackRun(true, "silent")
	var secs float64
	if _, err := fmt.Sscanf(res, "closed after %fs:", &secs); err != nil || secs > 10 || !strings.Contains(res, "not complete within 2s") {
		t.Fatalf("a request begun and never finished: %s", res)
	}
}
