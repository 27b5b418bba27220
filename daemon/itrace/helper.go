package itrace

// A session's tracer runs in a process of its own (the helper), started by
// the daemon with the caller's uid and gid, no supplementary groups and no
// capabilities: every ptrace request is then the kernel's to allow or
// refuse as it would for the caller itself (another user's process, one
// holding capabilities or not dumpable, Yama), and an exec of a setuid
// program by a traced process does not gain its privileges (the kernel
// records the tracer's credentials at attach). The helper writes its
// records to the daemon over a socket; the daemon checks and copies them
// into the facility's trace buffers.
//
// The helper is started from a copy of the daemon's binary that its user
// may execute but not read (helperImage): the kernel makes such a process
// not dumpable from its exec on, so its user can never ptrace it — not
// even in the moment before the helper itself could say so — to write
// into the trace, or the daemon's log, through its socket.
//
// The daemon's death closes the socket: the helper stops, detaching every
// thread cleanly (PTRACE_DETACH clears the trap flag), so the traced
// programs run on. A helper's death costs only its own session.

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"perfinsp/format/trace"
	itracectl "perfinsp/libperfutil/itrace"
)

// HelperArg is the first argument that makes the daemon's binary (or a
// test binary, from its TestMain) run HelperMain.
const HelperArg = "itrace-helper"

// Frames on the helper's socket: a type byte, a little-endian uint32
// length, the payload.
const (
	frameOptions  = 'O' // daemon to helper: helperOptions (JSON), first
	frameStop     = 'S' // daemon to helper: stop tracing
	frameAttached = 'A' // attachMsg (JSON): the session is running, or why not
	frameRecord   = 'R' // one record (encodeRecord)
	frameLog      = 'L' // a line for the daemon's log
	frameEnd      = 'E' // endMsg (JSON): the tracer ended, its counts; last
	maxFrame      = 64 << 10
	recordHeader  = 16 // cpu u16, major u16, minor u32, time u64
	maxFields     = 8
	maxSkipped    = 100 // processes left out, listed in the attach message
	maxLogLines   = 100 // log lines of one helper in the daemon's log
)

// helperOptions are Options on the wire.
type helperOptions struct {
	PIDs         []int          `json:"pids,omitempty"`
	TIDs         []int          `json:"tids,omitempty"`
	OptionalPIDs []int          `json:"optional_pids,omitempty"`
	Follow       bool           `json:"follow,omitempty"`
	AtExec       bool           `json:"at_exec,omitempty"`
	Step         itracectl.Step `json:"step,omitempty"`
	MaxThreads   int            `json:"max_threads,omitempty"`
	MaxInsns     uint64         `json:"max_insns,omitempty"`
}

type attachMsg struct {
	Err     string   `json:"err,omitempty"`
	Threads int      `json:"threads"`
	Skipped []string `json:"skipped,omitempty"`
}

type endMsg struct {
	Err   string `json:"err,omitempty"`
	Stats Stats  `json:"stats"`
}

func appendFrame(b []byte, typ byte, payload []byte) []byte {
	b = append(b, typ)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
	return append(b, payload...)
}

// readFrame reads one frame into buf (grown as needed, up to maxFrame).
func readFrame(r *bufio.Reader, buf []byte) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, buf, err
	}
	n := binary.LittleEndian.Uint32(h[1:])
	if n > maxFrame {
		return 0, buf, fmt.Errorf("frame of %d bytes (at most %d)", n, maxFrame)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, buf, err
	}
	return h[0], buf, nil
}

// helperSink writes the tracer's records to the daemon, buffered.
type helperSink struct {
	mu     sync.Mutex
	w      *bufio.Writer
	broken bool // the daemon is gone: drop the rest
	rec    []byte
}

func (s *helperSink) writeLocked(typ byte, payload []byte) {
	if s.broken {
		return
	}
	s.rec = appendFrame(s.rec[:0], typ, payload)
	if _, err := s.w.Write(s.rec); err != nil {
		s.broken = true
	}
}

func (s *helperSink) Trace(cpu int, major uint16, minor uint32, t uint64, fields []uint64) {
	if len(fields) > maxFields {
		fields = fields[:maxFields]
	}
	var p [recordHeader + 8*maxFields]byte
	binary.LittleEndian.PutUint16(p[0:], uint16(cpu))
	binary.LittleEndian.PutUint16(p[2:], major)
	binary.LittleEndian.PutUint32(p[4:], minor)
	binary.LittleEndian.PutUint64(p[8:], t)
	for i, f := range fields {
		binary.LittleEndian.PutUint64(p[recordHeader+8*i:], f)
	}
	s.mu.Lock()
	s.writeLocked(frameRecord, p[:recordHeader+8*len(fields)])
	s.mu.Unlock()
}

// flushEvery flushes the records gathered so far every period: a slow
// session's records (a thread that blocks) reach the buffers within a
// fraction of a second, not only when 64 KB have gathered.
func (s *helperSink) flushEvery(period time.Duration, stop <-chan struct{}) {
	tk := time.NewTicker(period)
	defer tk.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tk.C:
			s.mu.Lock()
			s.flushLocked()
			s.mu.Unlock()
		}
	}
}

func (s *helperSink) flushLocked() {
	if !s.broken && s.w.Flush() != nil {
		s.broken = true
	}
}

// send writes a JSON message and flushes.
func (s *helperSink) send(typ byte, v any) {
	b, _ := json.Marshal(v)
	s.mu.Lock()
	s.writeLocked(typ, b)
	s.flushLocked()
	s.mu.Unlock()
}

func (s *helperSink) logf(format string, args ...any) {
	s.mu.Lock()
	s.writeLocked(frameLog, []byte(fmt.Sprintf(format, args...)))
	s.flushLocked()
	s.mu.Unlock()
}

// HelperMain runs one session's tracer in the helper process: fd 3 is its
// socket to the daemon, fd 4 its program (helperImage; the helper was
// started through it; closed at once). It returns the exit code.
func HelperMain() int {
	_ = unix.Close(4)
	// Not dumpable: the caller may not ptrace its tracer to write into
	// the trace through its socket (started from helperImage it is not
	// dumpable already; this is for a helper started otherwise, by a
	// test). Signals it may send: a killed tracer costs its own session
	// only.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	nameMainThread("pitraced-itrace")
	// It never needs to gain a privilege by exec.
	_ = unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	conn := os.NewFile(3, "pitraced")
	if conn == nil {
		fmt.Fprintln(os.Stderr, "pitraced itrace-helper: no socket on fd 3 (pitraced starts this, not a user)")
		return 2
	}
	r := bufio.NewReader(conn)
	typ, p, err := readFrame(r, nil)
	if err != nil || typ != frameOptions {
		fmt.Fprintf(os.Stderr, "pitraced itrace-helper: no options from the daemon: %v\n", err)
		return 2
	}
	var o helperOptions
	if err := json.Unmarshal(p, &o); err != nil {
		fmt.Fprintf(os.Stderr, "pitraced itrace-helper: bad options: %v\n", err)
		return 2
	}
	sink := &helperSink{w: bufio.NewWriterSize(conn, 64<<10)}
	// Signals that would end the helper (a service manager stopping the
	// daemon's group, a terminal's Ctrl-C) stop the session cleanly
	// instead: killed, it would leave its threads with the trap flag set.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	// Every ptrace stop of a traced thread would send the helper a
	// SIGCHLD, run by the Go runtime's handler on some thread: a signal
	// frame, a handler and a sigreturn per stop, for nothing (wait4 is
	// woken without it). Ignored, the kernel sends none. The helper has
	// no children of its own to reap (it attaches; tracees are not its
	// children, and a ptraced task is never reaped automatically).
	signal.Ignore(syscall.SIGCHLD)
	tr, err := Start(Options{PIDs: o.PIDs, TIDs: o.TIDs, OptionalPIDs: o.OptionalPIDs, Follow: o.Follow,
		AtExec: o.AtExec, Step: o.Step, MaxThreads: o.MaxThreads, MaxInsns: o.MaxInsns, Log: sink.logf}, sink)
	if err != nil {
		sink.send(frameAttached, attachMsg{Err: err.Error()})
		return 1
	}
	skipped := tr.Skipped()
	if len(skipped) > maxSkipped {
		skipped = append(skipped[:maxSkipped], fmt.Sprintf("and %d more", len(skipped)-maxSkipped))
	}
	sink.send(frameAttached, attachMsg{Threads: tr.Stats().Threads, Skipped: skipped})
	// The daemon asks to stop, or is gone (end of file): stop.
	go func() {
		var buf []byte
		for {
			var typ byte
			var err error
			if typ, buf, err = readFrame(r, buf); err != nil || typ == frameStop {
				break
			}
		}
		tr.Stop()
	}()
	go func() {
		<-sigs
		tr.Stop()
	}()
	go sink.flushEvery(200*time.Millisecond, tr.Done())
	<-tr.Done()
	end := endMsg{Stats: tr.Stats()}
	if err := tr.Err(); err != nil {
		end.Err = err.Error()
	}
	sink.send(frameEnd, end)
	return 0
}

// remote is the daemon's side of one helper: the session's tracer.
type remote struct {
	proc *os.Process
	conn *os.File
	sink Sink
	log  func(format string, args ...any)
	done chan struct{}
	// attached receives the helper's attach message (once).
	attached chan attachMsg

	mu    sync.Mutex
	stats Stats
	err   error
	ended bool // frameEnd seen

	// So far, as the records pass (itrace status): user instructions (the
	// count of each block a record ends) and records.
	insnsSoFar, recordsSoFar atomic.Uint64
}

// countOf is the instructions a record from the helper ends a block with:
// the count field of a branch, kernel-work and END record (0: none).
func countOf(major uint16, minor uint32, fields []uint64) uint64 {
	switch {
	case major == trace.MajorITraceU && minor <= trace.ITraceUndefd && len(fields) > 1:
		return fields[1]
	case major == trace.MajorITraceU && minor == trace.ITraceEnd && len(fields) > 2:
		return fields[2]
	case major == trace.MajorITraceK && len(fields) > 1:
		return fields[1]
	}
	return 0
}

// nameMainThread gives the process its name in ps (started through a
// descriptor, it is "4"): the main thread's, set from the main thread,
// which runs main at its start. (Its /proc/self/comm, root's in a process
// that is not dumpable, cannot be written.)
func nameMainThread(name string) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if unix.Gettid() != os.Getpid() {
		return
	}
	if b, err := unix.BytePtrFromString(name); err == nil {
		_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(b)), 0, 0, 0)
	}
}

// helperExe is the program started as the helper: the running binary.
var helperExe = "/proc/self/exe"

// images holds the sealed copies of the helper's program (helperImage),
// by path: one for the daemon's life, shared by every helper.
var images struct {
	sync.Mutex
	m map[string]*os.File
}

// helperImage is the program at path as helpers are started from it: a
// sealed copy in memory, root's, that others may execute but not read.
// The kernel makes a process whose program its user may not read not
// dumpable from its exec on (as it does a setuid program's): a helper's
// user cannot ptrace it before the helper runs its first instruction.
// (The binary on disk is readable: started from it, a helper is dumpable
// until it says otherwise, after the Go runtime's start, and a user
// watching for it attaches first.)
func helperImage(path string) (*os.File, error) {
	images.Lock()
	defer images.Unlock()
	if f := images.m[path]; f != nil {
		return f, nil
	}
	f, err := sealedCopy(path)
	if err != nil {
		return nil, fmt.Errorf("itrace: a copy of the tracer's program that its user cannot read: %w", err)
	}
	if images.m == nil {
		images.m = map[string]*os.File{}
	}
	images.m[path] = f
	return f, nil
}

// sealedCopy copies the file at path into a memfd of mode 0511, sealed
// against any change.
func sealedCopy(path string) (*os.File, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	const flags = unix.MFD_CLOEXEC | unix.MFD_ALLOW_SEALING
	fd, err := unix.MemfdCreate("pitraced-itrace", flags|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) {
		fd, err = unix.MemfdCreate("pitraced-itrace", flags) // a kernel before MFD_EXEC (6.3)
	}
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "pitraced-itrace")
	if _, err := io.Copy(f, src); err != nil {
		f.Close()
		return nil, fmt.Errorf("copy %s: %w", path, err)
	}
	if err := f.Chmod(0o511); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		f.Close()
		return nil, fmt.Errorf("seal: %w", err)
	}
	return f, nil
}

// Timeouts of the helper: to attach (all threads seized), and to stop
// (all threads let go) before it is killed.
var (
	helperAttachTimeout = 60 * time.Second
	helperStopTimeout   = 10 * time.Second
)

// startRemote starts a helper as c (uid and gid; root's stays root) and
// waits until it attached, or says why it could not.
func startRemote(c Caller, opts Options, sink Sink, logf func(string, ...any)) (*remote, attachMsg, error) {
	var am attachMsg
	attr := &syscall.SysProcAttr{Setpgid: true} // a terminal's signals to the daemon are not the helper's
	switch {
	case os.Geteuid() == c.UID && os.Getegid() == c.GID:
		// A user's own agent: the helper is that user already.
	case os.Geteuid() != 0:
		return nil, am, fmt.Errorf("itrace: this agent (uid %d) cannot start a tracer as uid %d", os.Geteuid(), c.UID)
	default:
		attr.Credential = &syscall.Credential{Uid: uint32(c.UID), Gid: uint32(c.GID), Groups: []uint32{}}
	}
	exe, err := helperImage(helperExe)
	if err != nil {
		return nil, am, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, am, fmt.Errorf("itrace: socketpair: %w", err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, am, fmt.Errorf("itrace: %w", err)
	}
	conn := os.NewFile(uintptr(fds[0]), "itrace-helper")
	child := os.NewFile(uintptr(fds[1]), "itrace-helper")
	errR, errW, err := os.Pipe()
	if err != nil {
		conn.Close()
		return nil, am, fmt.Errorf("itrace: %w", err)
	}
	env := []string{}
	if v := os.Getenv("ITRACE_DEBUG"); v != "" {
		env = append(env, "ITRACE_DEBUG="+v)
	}
	// The program is run through its descriptor (fd 4 in the helper,
	// the sealed copy): a caller who cannot reach the daemon's directory
	// still runs it.
	cmd := &exec.Cmd{
		Path:        "/proc/self/fd/4",
		Args:        []string{"pitraced-itrace", HelperArg},
		Env:         env,
		Dir:         "/",
		ExtraFiles:  []*os.File{child, exe},
		Stderr:      errW,
		SysProcAttr: attr,
	}
	err = cmd.Start()
	errW.Close()
	child.Close() // the helper's end: its exit is the daemon's end of file
	if err != nil {
		conn.Close()
		errR.Close()
		return nil, am, fmt.Errorf("itrace: start the session's tracer as uid %d: %w", c.UID, err)
	}
	rm := &remote{proc: cmd.Process, conn: conn, sink: sink, log: logf, done: make(chan struct{}), attached: make(chan attachMsg, 1)}
	go rm.logStderr(errR)
	o, _ := json.Marshal(helperOptions{PIDs: opts.PIDs, TIDs: opts.TIDs, OptionalPIDs: opts.OptionalPIDs,
		Follow: opts.Follow, AtExec: opts.AtExec, Step: opts.Step, MaxThreads: opts.MaxThreads, MaxInsns: opts.MaxInsns})
	_ = conn.SetWriteDeadline(time.Now().Add(helperAttachTimeout))
	if _, err := conn.Write(appendFrame(nil, frameOptions, o)); err != nil {
		_ = rm.proc.Kill()
	}
	_ = conn.SetWriteDeadline(time.Time{})
	// Records may come before the helper says it attached: read already.
	go rm.read(bufio.NewReaderSize(conn, 64<<10))
	select {
	case am = <-rm.attached:
	case <-rm.done:
	case <-time.After(helperAttachTimeout):
		_ = rm.proc.Kill()
		<-rm.done
		return nil, am, fmt.Errorf("itrace: the session's tracer did not attach within %v: stopped", helperAttachTimeout)
	}
	if am.Err != "" {
		// It let its threads go before saying so, and exits; killed, it
		// cannot be kept from exiting by its user (SIGSTOP).
		_ = rm.proc.Kill()
		<-rm.done
		return nil, am, errors.New(am.Err)
	}
	select {
	case <-rm.done:
		if am.Threads == 0 {
			return nil, am, fmt.Errorf("itrace: the session's tracer failed: %v", rm.Err())
		}
	default:
	}
	return rm, am, nil
}

// logStderr logs what the helper writes to its standard error (a Go
// panic, at worst): a bounded number of lines, control characters escaped.
func (rm *remote) logStderr(f *os.File) {
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 4096), 4096)
	n := 0
	for sc.Scan() {
		if n++; n <= 50 && rm.log != nil {
			rm.log("itrace tracer (pid %d): %s", rm.proc.Pid, escape(sc.Text()))
		}
	}
}

// escape keeps a line one line: control characters become \xNN.
func escape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == '\u2028' || r == '\u2029' {
			fmt.Fprintf(&b, "\\x%02x", r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// read copies the helper's records to the sink until it ends.
func (rm *remote) read(r *bufio.Reader) {
	defer close(rm.done)
	var buf []byte
	var fields [maxFields]uint64
	var perr error
	logged := 0
	for {
		var typ byte
		var err error
		typ, buf, err = readFrame(r, buf)
		if err != nil {
			// ECONNRESET: the helper closed its end with a request of
			// the daemon's unread (an off crossing its end); what it
			// wrote before was read first, so it is its end of file.
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, os.ErrClosed) && !errors.Is(err, syscall.ECONNRESET) {
				perr = err
			}
			break
		}
		switch typ {
		case frameRecord:
			if len(buf) < recordHeader || (len(buf)-recordHeader)%8 != 0 || len(buf) > recordHeader+8*maxFields {
				perr = fmt.Errorf("a record of %d bytes", len(buf))
				break
			}
			major := binary.LittleEndian.Uint16(buf[2:])
			if major != trace.MajorITraceU && major != trace.MajorITraceK {
				perr = fmt.Errorf("a record of major %#x (not ITrace's)", major)
				break
			}
			n := (len(buf) - recordHeader) / 8
			for i := 0; i < n; i++ {
				fields[i] = binary.LittleEndian.Uint64(buf[recordHeader+8*i:])
			}
			minor := binary.LittleEndian.Uint32(buf[4:])
			rm.insnsSoFar.Add(countOf(major, minor, fields[:n]))
			rm.recordsSoFar.Add(1)
			rm.sink.Trace(int(binary.LittleEndian.Uint16(buf[0:])), major, minor,
				binary.LittleEndian.Uint64(buf[8:]), fields[:n])
		case frameAttached:
			var am attachMsg
			if err := json.Unmarshal(buf, &am); err != nil {
				perr = fmt.Errorf("its attach message: %w", err)
				break
			}
			rm.mu.Lock()
			rm.stats.Threads, rm.stats.Traced = am.Threads, am.Threads
			rm.mu.Unlock()
			select {
			case rm.attached <- am:
			default:
				perr = errors.New("a second attach message")
			}
		case frameLog:
			if logged++; logged <= maxLogLines && rm.log != nil {
				rm.log("%s", escape(string(buf)))
			}
		case frameEnd:
			var e endMsg
			if err := json.Unmarshal(buf, &e); err != nil {
				perr = fmt.Errorf("its end: %w", err)
				break
			}
			rm.mu.Lock()
			rm.stats, rm.ended = e.Stats, true
			if e.Err != "" {
				rm.err = errors.New(e.Err)
			}
			rm.mu.Unlock()
		default:
			perr = fmt.Errorf("a frame of type %q", typ)
		}
		if perr != nil {
			break
		}
	}
	if perr != nil {
		// Not what a helper writes: it is not trusted further.
		_ = rm.proc.Kill()
	}
	rm.conn.Close()
	st, _ := rm.proc.Wait()
	rm.mu.Lock()
	defer rm.mu.Unlock()
	switch {
	case perr != nil:
		rm.err = fmt.Errorf("itrace: the session's tracer (pid %d) sent %v: it was stopped", rm.proc.Pid, perr)
	case !rm.ended:
		how := "ended"
		if st != nil {
			how = st.String()
		}
		rm.err = fmt.Errorf("itrace: the session's tracer (pid %d) %s before it finished: its records since the last were lost, and the kernel let its threads go (a thread stopped in a single step dies of SIGTRAP)", rm.proc.Pid, how)
	}
}

// Done is closed when the helper ended.
func (rm *remote) Done() <-chan struct{} { return rm.done }

// Err is why the session ended early, after Done.
func (rm *remote) Err() error {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	return rm.err
}

// Stats returns the counts: the threads attached until the helper ended,
// then its final counts.
func (rm *remote) Stats() Stats {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	return rm.stats
}

// Stop asks the helper to let its threads go and waits for its last
// records; a helper that does not finish in time (stopped by its user) is
// killed: its own threads may then die of their trap flag.
func (rm *remote) Stop() Stats {
	_ = rm.conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = rm.conn.Write(appendFrame(nil, frameStop, nil))
	select {
	case <-rm.done:
	case <-time.After(helperStopTimeout):
		_ = rm.proc.Kill()
		<-rm.done
	}
	return rm.Stats()
}

// pid is the helper's process id.
func (rm *remote) pid() int { return rm.proc.Pid }
