package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"perfinsp/daemon/facility"
	"perfinsp/daemon/kevents"
	"perfinsp/internal/daemonproto"
	"perfinsp/internal/testenv"
	"perfinsp/libperfutil/control"
)

func TestShutdownIsRootOnly(t *testing.T) {
	s := &Server{Fac: facility.New()}
	if _, err := s.dispatch(&Request{Peer: Peer{UID: 1000, PID: 1}}, daemonproto.OpShutdown); !errors.Is(err, control.ErrRootOnly) {
		t.Fatalf("shutdown by uid 1000: %v", err)
	}
	if _, err := s.dispatch(&Request{Peer: Peer{UID: 0, PID: 1}}, daemonproto.OpShutdown); err != nil {
		t.Fatalf("shutdown by root: %v", err)
	}
	u := &Server{Fac: facility.New(), User: true}
	if _, err := u.dispatch(&Request{Peer: Peer{UID: 1000}}, daemonproto.OpInit); err == nil {
		t.Fatal("a user's own agent accepted a facility op")
	}
}

// The stack-unwind op (swtrace enable callstack --unwind) is the system
// facility's: a user's own agent refuses it; the facility refuses a stack
// copy the kernel would not take.
func TestStackUnwindOp(t *testing.T) {
	u := &Server{Fac: facility.New(), User: true}
	req := func(args string) *Request {
		return &Request{Peer: Peer{UID: 1000}, Args: json.RawMessage(args)}
	}
	if _, err := u.dispatch(req(`{"dwarf":true,"stack_bytes":8192}`), daemonproto.OpStackUnwind); err == nil {
		t.Fatal("a user's own agent accepted stack-unwind")
	}
	s := &Server{Fac: facility.New()}
	if _, err := s.dispatch(req(`{"dwarf":true,"stack_bytes":8192}`), daemonproto.OpStackUnwind); err != nil {
		t.Fatalf("dwarf,8192: %v", err)
	}
	for _, bad := range []string{`{"dwarf":true,"stack_bytes":100}`, `{"dwarf":true,"stack_bytes":70000}`, `{"dwarf":true}`, ``} {
		if _, err := s.dispatch(req(bad), daemonproto.OpStackUnwind); err == nil {
			t.Errorf("stack-unwind %q accepted", bad)
		}
	}
}

// A client's words in a log line never end the line or pass for a
// separator: every control character, invalid byte and non-printing rune
// is escaped.
func TestLogSafe(t *testing.T) {
	in := "uid 1: mode: refused: bad \"x\nuid 0 pid 1: on: done\r\x00\x1b[2J\u2028\u0085\u00a0/etc/evil.so\xff\xfe ok \uFFFD é"
	out := LogSafe(in)
	for _, bad := range []string{"\n", "\r", "\x00", "\x1b", "\u2028", "\u0085", "\u00a0", "\xff"} {
		if strings.Contains(out, bad) {
			t.Fatalf("LogSafe left %q in %q", bad, out)
		}
	}
	for _, want := range []string{`\n`, `\r`, `\x00`, `\x1b`, `\u2028`, `\u0085`, `\u00a0`, `\xff`, " ok \uFFFD é"} {
		if !strings.Contains(out, want) {
			t.Fatalf("LogSafe(%q) = %q: no %q", in, out, want)
		}
	}
}

// noSource stands for the kernel event sources (the ops are tested, not
// perf).
type noSource struct{}

func (noSource) Stop() error { return nil }

func fakeServer() *Server {
	f := facility.New()
	f.StartSource = func(kevents.Options, facility.Sink) (facility.Source, error) { return noSource{}, nil }
	f.Scan = func(uint64, func(uint32, []uint64, string)) error { return nil }
	return &Server{Fac: f}
}

func call(t *testing.T, s *Server, uid int, op string, args any) error {
	t.Helper()
	var raw json.RawMessage
	if args != nil {
		raw, _ = json.Marshal(args)
	}
	_, err := s.dispatch(&Request{Peer: Peer{UID: uid, PID: 1}, Args: raw}, op)
	return err
}

// A hook record goes only into the caller's own trace: another member's is
// refused naming the holder, the holder's and root's are written.
func TestHookOnlyIntoOwnTrace(t *testing.T) {
	s := fakeServer()
	const holder, other = 1000, 1001
	if err := call(t, s, holder, daemonproto.OpInit, daemonproto.InitArgs{TraceBufSize: 64 << 10, MTEBufSize: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	if err := call(t, s, holder, daemonproto.OpOn, nil); err != nil {
		t.Fatal(err)
	}
	hook := daemonproto.HookArgs{Major: 0x100, Minor: 1, Words: []uint32{7}}
	if err := call(t, s, other, daemonproto.OpHook, hook); !errors.Is(err, control.ErrNotOwner) || !strings.Contains(err.Error(), "uid 1000") {
		t.Fatalf("uid %d's hook into uid %d's trace: %v, want refused naming the holder", other, holder, err)
	}
	for _, uid := range []int{holder, 0} {
		if err := call(t, s, uid, daemonproto.OpHook, hook); err != nil {
			t.Fatalf("uid %d's hook into uid %d's trace: %v", uid, holder, err)
		}
	}
	st, _ := s.Fac.Info()
	var recs uint64
	for _, c := range st.CPUs {
		recs += c.Records
	}
	// 2 hooks, plus SYS_INFO and a TRACE_ON per CPU
	if want := uint64(2 + 1 + len(st.CPUs)); recs != want {
		t.Fatalf("%d records in the trace, want %d (the holder's and root's hooks)", recs, want)
	}
}

// The stream file's name (a path of the user who named it) is shown by
// info only to that user while they hold the facility, and to root: not
// to another member, nor to the next holder.
func TestInfoHidesStreamFile(t *testing.T) {
	s := fakeServer()
	const holder, other = 1000, 1001
	const name = "/home/u1000/project-x/stream.nrm2"
	if err := call(t, s, holder, daemonproto.OpMode, daemonproto.ModeArgs{Mode: control.ModeWrap, File: name}); err != nil {
		t.Fatal(err)
	}
	sees := func(uid int, want bool) {
		t.Helper()
		res, err := s.dispatch(&Request{Peer: Peer{UID: uid, PID: 1}}, daemonproto.OpInfo)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(res)
		if got := strings.Contains(string(b), "project-x"); got != want {
			t.Fatalf("uid %d sees the stream file's name: %v, want %v: %s", uid, got, want, b)
		}
	}
	sees(holder, true)
	sees(0, true)
	sees(other, false)
	if err := call(t, s, holder, daemonproto.OpFree, nil); err != nil {
		t.Fatal(err)
	}
	sees(holder, false) // nobody holds the facility
	if err := call(t, s, other, daemonproto.OpRate, daemonproto.RateArgs{Hz: 500}); err != nil {
		t.Fatal(err)
	}
	sees(other, false) // the next holder did not name it
	sees(0, true)
}

// A user other than root may not have the agent allocate buffers past
// MaxUserBuffers (half the machine's memory by default: the format allows
// 1 GB per buffer and CPU, and many CPUs times 2 GB is more than a machine
// has); root may.
func TestUserBuffersBounded(t *testing.T) {
	s := fakeServer()
	small := daemonproto.InitArgs{TraceBufSize: 64 << 10, MTEBufSize: 64 << 10}
	limit, err := s.Fac.BufferBytes(control.Config{TraceBufSize: small.TraceBufSize, MTEBufSize: small.MTEBufSize})
	if err != nil {
		t.Fatal(err)
	}
	s.MaxUserBuffers = limit
	big := daemonproto.InitArgs{TraceBufSize: 1 << 20, MTEBufSize: 64 << 10}
	if err := call(t, s, 1000, daemonproto.OpInit, big); err == nil || !strings.Contains(err.Error(), "more than a user other than root may") {
		t.Fatalf("uid 1000's init past the bound: %v", err)
	}
	if st := s.Fac.State(); st != control.StateFree {
		t.Fatalf("the refused init left the facility %s", st)
	}
	// on from the free state allocates the defaults: past the bound too.
	if err := call(t, s, 1000, daemonproto.OpOn, nil); err == nil || !strings.Contains(err.Error(), "more than a user other than root may") {
		t.Fatalf("uid 1000's on with the default buffers past the bound: %v", err)
	}
	if err := call(t, s, 1000, daemonproto.OpInit, small); err != nil {
		t.Fatalf("uid 1000's init within the bound: %v", err)
	}
	if err := call(t, s, 1000, daemonproto.OpFree, nil); err != nil {
		t.Fatal(err)
	}
	if err := call(t, s, 0, daemonproto.OpInit, big); err != nil {
		t.Fatalf("root's init: %v", err)
	}
}

// A binary frame reaches only an op registered for frames: never a core
// op, nor an extension's JSON handler.
func TestFramesOnlyToFrameOps(t *testing.T) {
	s := &Server{Fac: facility.New()}
	jsonCalls, frameCalls := 0, 0
	s.Handle("ext", func(Peer, json.RawMessage) (any, error) { jsonCalls++; return nil, nil })
	s.HandleFrame("bin", func(_ Peer, b []byte) (any, error) { frameCalls += len(b); return nil, nil })
	for _, op := range []string{daemonproto.OpShutdown, daemonproto.OpOff, daemonproto.OpFree, "ext"} {
		if _, err := s.dispatchFrame(Peer{UID: 0}, op, []byte("x")); err == nil || !strings.Contains(err.Error(), "takes no binary frame") {
			t.Errorf("a frame to %q: %v", op, err)
		}
	}
	if _, err := s.dispatchFrame(Peer{UID: 1000}, "bin", []byte("abc")); err != nil || frameCalls != 3 || jsonCalls != 0 {
		t.Fatalf("a frame to its op: %v, %d bytes seen, %d JSON calls", err, frameCalls, jsonCalls)
	}
	if _, err := s.dispatch(&Request{Peer: Peer{UID: 0}, Args: json.RawMessage(`{}`)}, "bin"); err == nil {
		t.Fatal("a JSON request reached a frame-only op")
	}
}

// A result larger than any request reaches the client; one larger than
// any message is answered with an error that says so, and the connection
// goes on serving (it was once closed without a word).
func TestLargeResult(t *testing.T) {
	s := &Server{Fac: facility.New(), Path: filepath.Join(t.TempDir(), "s.sock")}
	big := strings.Repeat("x", 3*daemonproto.MaxRequest)
	s.Handle("big", func(Peer, json.RawMessage) (any, error) { return big, nil })
	s.Handle("huge", func(Peer, json.RawMessage) (any, error) { return strings.Repeat("y", daemonproto.MaxResponse), nil })
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	defer func() { s.Shutdown(); <-served }()
	uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: s.Path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	c := daemonproto.NewConn(uc)
	defer c.Close()
	c.MaxLine = daemonproto.MaxResponse
	call := func(op string) daemonproto.Response {
		t.Helper()
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		if err := c.Send(&daemonproto.Request{Op: op}); err != nil {
			t.Fatalf("%s: send: %v", op, err)
		}
		var resp daemonproto.Response
		if _, err := c.Receive(&resp); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		return resp
	}
	var got string
	if r := call("big"); !r.OK || json.Unmarshal(r.Result, &got) != nil || got != big {
		t.Fatalf("big: ok %v, error %q, %d bytes", r.OK, r.Error, len(r.Result))
	}
	if r := call("huge"); r.OK || !strings.Contains(r.Error, "too large to send") {
		t.Fatalf("huge: ok %v, error %q", r.OK, r.Error)
	}
	if r := call(daemonproto.OpPing); !r.OK {
		t.Fatalf("ping after a refused result: %q", r.Error)
	}
}

// The large answers a user is being sent at once are bounded: a client
// that does not read its answer holds its bytes, and another of its
// connections asking for one more is told to read first; read, the
// bytes come back.
func TestLargeAnswersBounded(t *testing.T) {
	s := &Server{Fac: facility.New(), MaxAnswers: 4 << 20}
	big := strings.Repeat("x", 3*daemonproto.MaxRequest)
	s.Handle("big", func(Peer, json.RawMessage) (any, error) { return big, nil })
	conn := func() *daemonproto.Conn {
		a, b, err := unixPair()
		if err != nil {
			t.Fatal(err)
		}
		go s.serveConn(b, Peer{UID: 1000, PID: 1})
		c := daemonproto.NewConn(a)
		c.MaxLine = daemonproto.MaxResponse
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		return c
	}
	stalled := conn()
	if err := stalled.Send(&daemonproto.Request{Op: "big"}); err != nil {
		t.Fatal(err)
	}
	// The answer is being sent, and waits for its reader.
	testenv.WaitFor(t, "the first answer to be counted", func() bool { return s.answersOf(1000) > 0 })
	other := conn()
	if err := other.Send(&daemonproto.Request{Op: "big"}); err != nil {
		t.Fatal(err)
	}
	var resp daemonproto.Response
	if _, err := other.Receive(&resp); err != nil || resp.OK || !strings.Contains(resp.Error, "read them first") || resp.Code != control.ErrBusy.Code {
		t.Fatalf("a second large answer while the first is unread: %v %+v", err, resp.Error)
	}
	if _, err := stalled.Receive(&resp); err != nil || !resp.OK {
		t.Fatalf("the first answer: %v %q", err, resp.Error)
	}
	testenv.WaitFor(t, "the first answer's bytes to come back", func() bool { return s.answersOf(1000) == 0 })
	if err := other.Send(&daemonproto.Request{Op: "big"}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Receive(&resp); err != nil || !resp.OK {
		t.Fatalf("a large answer once the first was read: %v %q", err, resp.Error)
	}
}

// unixPair is a connected pair of Unix stream sockets.
func unixPair() (*net.UnixConn, *net.UnixConn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var cs [2]*net.UnixConn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			return nil, nil, err
		}
		cs[i] = c.(*net.UnixConn)
	}
	return cs[0], cs[1], nil
}

// One user's requests, refused ones too, cannot fill the log: past a
// burst, one line per LogEveryPerUID is logged, and the number left out is
// said with the next line logged.
func TestRequestLogBoundedPerUser(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	count := func(sub string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, l := range lines {
			if strings.Contains(l, sub) {
				n++
			}
		}
		return n
	}
	s := &Server{Fac: facility.New(), Path: filepath.Join(t.TempDir(), "pitraced.sock"), Log: func(format string, args ...any) {
		mu.Lock()
		lines = append(lines, fmt.Sprintf(format, args...))
		mu.Unlock()
	}}
	// uid 1001 holds the facility: uid 1000's free is refused, and logged
	if err := s.Fac.Claim(1001, false); err != nil {
		t.Fatal(err)
	}
	a, b, err := unixPair()
	if err != nil {
		t.Fatal(err)
	}
	go s.serveConn(b, Peer{UID: 1000, PID: 1})
	c := daemonproto.NewConn(a)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	free := func() {
		t.Helper()
		var resp daemonproto.Response
		if err := c.Send(&daemonproto.Request{Op: daemonproto.OpFree}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Receive(&resp); err != nil || resp.OK {
			t.Fatalf("uid 1000's free of uid 1001's facility: %v %+v", err, resp)
		}
	}
	const n = 2000
	start := time.Now()
	for range n {
		free()
	}
	most := LogBurstPerUID + int(time.Since(start)/LogEveryPerUID) + 1
	if got := count("uid 1000 pid 1: free: refused"); got > most || got < LogBurstPerUID {
		t.Fatalf("%d refused requests logged %d lines, want %d to %d", n, got, LogBurstPerUID, most)
	}
	testenv.WaitFor(t, "a line saying how many lines were not logged", func() bool {
		free()
		return count("lines about its requests were not logged") > 0
	})
}

// The state file is written by every connection's mutating requests: at
// once from many, each write is whole (they share one temporary file) and
// none fails.
func TestStateWritesAtOnce(t *testing.T) {
	var mu sync.Mutex
	var errs []string
	s := &Server{Fac: facility.New(), Path: filepath.Join(t.TempDir(), "pitraced.sock"), Log: func(format string, args ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf(format, args...))
		mu.Unlock()
	}}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				s.writeState()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Errorf("%d of 1600 state writes at once failed, the first: %s", len(errs), errs[0])
	}
	b, err := os.ReadFile(daemonproto.StatePath(s.Path))
	var st daemonproto.State
	if err != nil || json.Unmarshal(b, &st) != nil || st.PID != os.Getpid() {
		t.Errorf("the state file after the writes: %q %v", b, err)
	}
}
