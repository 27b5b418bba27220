// Package server is pitraced's control socket: it accepts connections on a
// Unix socket (root-only by default, or a group's), reads one JSON request
// per line and answers from the trace facility or from handlers other
// parts of the daemon register.
package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"perfinsp/daemon/facility"
	"perfinsp/internal/daemonproto"
	"perfinsp/libperfutil/control"
)

// Version of the daemon protocol.
const Version = "1"

// Peer identifies the connected client (SO_PEERCRED).
type Peer struct {
	PID, UID, GID int
}

// Root reports whether the peer is root.
func (p Peer) Root() bool { return p.UID == 0 }

// Request is one request as a handler sees it: who sent it, its arguments
// and the files it carried (opened by the client with its own rights).
type Request struct {
	Peer
	Args  json.RawMessage
	files []*os.File
}

// File takes the i-th file the request carried (nil if none): the handler
// owns it from here. Files not taken are closed after the handler returns.
func (r *Request) File(i int) *os.File {
	if i >= len(r.files) {
		return nil
	}
	f := r.files[i]
	r.files[i] = nil
	return f
}

// ClientFile checks a file a client passed for the agent to write: a
// regular file on an ordinary file system (control.CheckRegular: never
// /proc, /sys, cgroup, debugfs, ...), owned by the caller unless the caller
// is root (the agent writes only what the caller could have created), with
// no set-id bits.
func ClientFile(f *os.File, p Peer) error {
	if err := control.CheckRegular(f); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("stat the file passed: %w", err)
	}
	if !p.Root() && int(st.Uid) != p.UID {
		return control.Errorf(control.ErrBadFile, "the file passed belongs to uid %d, not to you (uid %d): the agent writes only your own files", st.Uid, p.UID)
	}
	if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
		return control.Errorf(control.ErrBadFile, "the file passed has set-id bits (mode %o): trace files are plain 0600 files", st.Mode&0o7777)
	}
	return nil
}

// clientFile takes the i-th file (nil if none) after ClientFile's checks.
func (r *Request) clientFile(i int) (*os.File, error) {
	f := r.File(i)
	if f == nil {
		return nil, nil
	}
	if err := ClientFile(f, r.Peer); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Handler serves one extra op. args is the request's raw arguments.
type Handler func(p Peer, args json.RawMessage) (any, error)

// FrameHandler serves an op sent as a binary frame (daemonproto.FrameMagic):
// its payload, raw bytes the client wrote.
type FrameHandler func(p Peer, payload []byte) (any, error)

// RequestHandler serves one extra op with access to the request's files.
type RequestHandler func(r *Request) (any, error)

// Limits of the control socket.
const (
	// MaxConnsPerUID caps the connections one user holds open at once
	// (root included): a flood of connections must not exhaust the
	// daemon's descriptors and take the trace down with it.
	MaxConnsPerUID = 64
	// RequestTimeout bounds the reading of one request once its first
	// byte has arrived (Server.RequestTimeout changes it).
	RequestTimeout = 30 * time.Second
	// MaxPendingPerUID caps the bytes of unfinished requests one user's
	// connections hold together: room for two of the largest requests.
	MaxPendingPerUID = 2 * daemonproto.MaxRequest
	// MaxAnswersPerUID caps the bytes of the answers larger than a
	// request (daemonproto.MaxResponse) that one user's connections are
	// sending at once (Server.MaxAnswers changes it; root is not
	// bounded): a client that does not read its answer holds it for
	// RequestTimeout.
	MaxAnswersPerUID = 16 << 20
	// LogBurstPerUID lines about one user's requests are logged at once,
	// then one per LogEveryPerUID (root is not bounded); the lines left
	// out are counted, and the count logged with the next line. A user's
	// requests, refused ones too, must not fill the file system holding
	// the log (/run, a small tmpfs, when swtrace started the agent).
	LogBurstPerUID = 100
	LogEveryPerUID = time.Second
)

// Server serves the control socket.
type Server struct {
	Fac      *facility.Facility
	Path     string
	Group    string        // if set, members of this group may connect
	IdleExit time.Duration // exit after this long with nothing traced (0: never)
	Log      func(format string, args ...any)
	// User marks a user's own agent (pitraced --user, not root): it hosts
	// services for its user and refuses the trace facility's ops.
	User bool
	// RequestTimeout bounds the reading of one request once begun (0:
	// the RequestTimeout constant).
	RequestTimeout time.Duration
	// MaxAnswers bounds the large answers one user other than root is
	// sent at once (0: MaxAnswersPerUID).
	MaxAnswers int
	// MaxUserBuffers bounds the trace buffers a user other than root may
	// have the agent allocate, all CPUs together (0: half the machine's
	// memory).
	MaxUserBuffers int64

	mu       sync.Mutex
	handlers map[string]RequestHandler
	frames   map[string]FrameHandler
	conns    perUID // open connections per uid
	pending  perUID // bytes of unfinished requests per uid
	answers  perUID // bytes of large answers being sent per uid
	logged   map[int]*logQuota
	stateMu  sync.Mutex // one writeState at a time (they share the temporary file)
	ln       *net.UnixListener
	last     time.Time
	done     chan struct{}
	once     sync.Once
	shutdown []func()
	busy     []func() bool
}

// Handle registers an extra op.
func (s *Server) Handle(op string, h Handler) {
	s.HandleRequest(op, func(r *Request) (any, error) { return h(r.Peer, r.Args) })
}

// HandleRequest registers an extra op that may take the request's files.
func (s *Server) HandleRequest(op string, h RequestHandler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.handlers == nil {
		s.handlers = map[string]RequestHandler{}
	}
	s.handlers[op] = h
}

// HandleFrame registers an op that takes a binary frame. The op's JSON form,
// if any, is registered apart (Handle).
func (s *Server) HandleFrame(op string, h FrameHandler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.frames == nil {
		s.frames = map[string]FrameHandler{}
	}
	s.frames[op] = h
}

// OnShutdown registers work to do when the daemon exits (services stop
// what they host).
func (s *Server) OnShutdown(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shutdown = append(s.shutdown, fn)
}

func (s *Server) logf(format string, args ...any) {
	if s.Log != nil {
		s.Log(format, args...)
	}
}

// Listen creates the socket with the right owner and permissions.
func (s *Server) Listen() error {
	// The directory is checked before anything is created or removed in
	// it: another user must not be able to plant the state file or a link
	// for the agent to write through.
	dir := filepath.Dir(s.Path)
	if err := daemonproto.CheckAgentPath(dir, os.Geteuid()); err != nil {
		return fmt.Errorf("socket directory: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create socket directory: %w", err)
	}
	if err := daemonproto.CheckAgentDir(dir, os.Geteuid()); err != nil {
		return fmt.Errorf("socket directory: %w", err)
	}
	// A socket left by a dead daemon is removed; a live daemon is an error.
	if c, err := net.DialTimeout("unix", s.Path, 500*time.Millisecond); err == nil {
		c.Close()
		return fmt.Errorf("another pitraced is already listening on %s", s.Path)
	}
	_ = os.Remove(s.Path)
	raiseNoFile()
	old := unix.Umask(0o177)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: s.Path, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.Path, err)
	}
	ln.SetUnlinkOnClose(false)
	if s.Group != "" {
		g, err := user.LookupGroup(s.Group)
		if err != nil {
			ln.Close()
			return fmt.Errorf("group %q: %w", s.Group, err)
		}
		gid, _ := strconv.Atoi(g.Gid)
		if err := os.Chown(s.Path, 0, gid); err != nil {
			ln.Close()
			return fmt.Errorf("chown socket: %w", err)
		}
		if err := os.Chmod(s.Path, 0o660); err != nil {
			ln.Close()
			return fmt.Errorf("chmod socket: %w", err)
		}
	}
	s.ln = ln
	s.done = make(chan struct{})
	s.last = time.Now()
	s.writeState()
	return nil
}

// raiseNoFile lifts the soft descriptor limit to the hard one.
func raiseNoFile() {
	var r unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &r) == nil && r.Cur < r.Max {
		r.Cur = r.Max
		_ = unix.Setrlimit(unix.RLIMIT_NOFILE, &r)
	}
}

// Serve accepts connections until Shutdown. Running out of descriptors is
// waited out, never fatal: the daemon holds the trace.
func (s *Server) Serve() error {
	if s.IdleExit > 0 {
		go s.idleWatch()
	}
	backoff := 5 * time.Millisecond
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			select {
			case <-s.done:
				return nil
			default:
			}
			if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) || errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.ENOMEM) {
				if backoff == 5*time.Millisecond {
					s.logf("accept: %v: refusing new connections for a moment", err)
				}
				time.Sleep(backoff)
				if backoff < time.Second {
					backoff *= 2
				}
				continue
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		backoff = 5 * time.Millisecond
		peer := peerOf(c)
		if !s.admit(peer.UID) {
			pc := daemonproto.NewConn(c)
			_ = pc.SetDeadline(time.Now().Add(time.Second))
			_ = pc.Send(&daemonproto.Response{Error: fmt.Sprintf("too many connections from uid %d (at most %d at once)", peer.UID, MaxConnsPerUID), Code: control.ErrBusy.Code})
			c.Close()
			continue
		}
		go s.serveConn(c, peer)
	}
}

// perUID counts what each user holds of one resource (connections, bytes
// of unfinished requests, bytes of large answers). Callers hold s.mu.
type perUID struct{ n map[int]int }

// take adds k to uid's count unless that would pass most.
func (p *perUID) take(uid, k, most int) bool {
	if p.n[uid]+k > most {
		return false
	}
	if p.n == nil {
		p.n = map[int]int{}
	}
	p.n[uid] += k
	return true
}

// give takes k off uid's count.
func (p *perUID) give(uid, k int) {
	if p.n == nil {
		return
	}
	if p.n[uid] -= k; p.n[uid] <= 0 {
		delete(p.n, uid)
	}
}

func (s *Server) admit(uid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns.take(uid, 1, MaxConnsPerUID)
}

func (s *Server) release(uid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns.give(uid, 1)
}

// Shutdown stops tracing, closes the socket and makes Serve return.
func (s *Server) Shutdown() {
	s.once.Do(func() {
		s.mu.Lock()
		fns := s.shutdown
		s.mu.Unlock()
		for _, fn := range fns {
			fn()
		}
		if st := s.Fac.State(); st == control.StateOn {
			_ = s.Fac.Off()
		}
		// The files go first: Serve returns as soon as the listener is
		// closed, and the process may exit right after it (a SIGTERM left
		// the state file behind, and the next client reported a daemon
		// that "ended without shutting down").
		_ = os.Remove(s.Path)
		_ = os.Remove(daemonproto.StatePath(s.Path))
		close(s.done)
		if s.ln != nil {
			s.ln.Close()
		}
	})
}

// Busy registers a test of whether a hosted service has work that would be
// lost if the daemon exited (the idle exit waits for it).
func (s *Server) Busy(fn func() bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy = append(s.busy, fn)
}

func (s *Server) hostsWork() bool {
	s.mu.Lock()
	fns := s.busy
	s.mu.Unlock()
	for _, fn := range fns {
		if fn() {
			return true
		}
	}
	return false
}

// writeState records what this daemon holds, so that a client finding it
// dead can say what was lost and start its successor with the same
// options.
func (s *Server) writeState() {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	st := daemonproto.State{PID: os.Getpid(), Group: s.Group, IdleExit: s.IdleExit.String(), State: s.Fac.State(),
		Unsaved: !s.Fac.Idle(), Owner: s.Fac.Owner(), Time: time.Now()}
	if err := daemonproto.WriteState(s.Path, &st); err != nil {
		s.logf("state file: %v", err)
	}
}

func (s *Server) idleWatch() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		s.mu.Lock()
		idle := time.Since(s.last)
		s.mu.Unlock()
		if s.Fac.Idle() && !s.hostsWork() && idle > s.IdleExit {
			s.logf("idle for %s with nothing unsaved: exiting", idle.Round(time.Second))
			s.Shutdown()
			return
		}
	}
}

func peerOf(c *net.UnixConn) Peer {
	p := Peer{PID: -1, UID: -1, GID: -1}
	raw, err := c.SyscallConn()
	if err != nil {
		return p
	}
	_ = raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			p = Peer{PID: int(cred.Pid), UID: int(cred.Uid), GID: int(cred.Gid)}
		}
	})
	return p
}

// pendingBudget counts one user's unfinished request bytes
// (daemonproto.Budget).
type pendingBudget struct {
	s   *Server
	uid int
}

func (b pendingBudget) Take(n int) error {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	if !b.s.pending.take(b.uid, n, MaxPendingPerUID) {
		return fmt.Errorf("%w: uid %d's connections hold %d bytes of unfinished requests, the most one user may (%d)", daemonproto.ErrPending, b.uid, b.s.pending.n[b.uid], MaxPendingPerUID)
	}
	return nil
}

func (b pendingBudget) Give(n int) {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	b.s.pending.give(b.uid, n)
}

func (s *Server) requestTimeout() time.Duration {
	if s.RequestTimeout > 0 {
		return s.RequestTimeout
	}
	return RequestTimeout
}

func (s *Server) serveConn(c *net.UnixConn, peer Peer) {
	pc := daemonproto.NewConn(c)
	pc.RequestTimeout = s.requestTimeout()
	pc.Budget = pendingBudget{s, peer.UID}
	defer s.release(peer.UID)
	defer pc.Close()
	for {
		// Idle connections may wait for their next request as long as
		// they like; a request, once started, must arrive in time.
		_ = pc.SetDeadline(time.Time{})
		var req daemonproto.Request
		files, err := pc.Receive(&req)
		if err != nil {
			_ = pc.SetDeadline(time.Now().Add(time.Second))
			switch {
			case errors.Is(err, daemonproto.ErrTooLarge):
				_ = pc.Send(&daemonproto.Response{Error: fmt.Sprintf("request too large (%v)", err)})
				return
			case errors.Is(err, daemonproto.ErrPending):
				_ = pc.Send(&daemonproto.Response{Error: err.Error(), Code: control.ErrBusy.Code})
				return
			case errors.Is(err, os.ErrDeadlineExceeded):
				_ = pc.Send(&daemonproto.Response{Error: fmt.Sprintf("request not complete within %s of its first byte: connection closed", pc.RequestTimeout)})
				return
			}
			if strings.HasPrefix(err.Error(), "bad message") {
				_ = pc.Send(&daemonproto.Response{Error: "bad request: " + err.Error()})
				continue
			}
			return
		}
		s.mu.Lock()
		s.last = time.Now()
		s.mu.Unlock()
		r := &Request{Peer: peer, Args: req.Args, files: files}
		var resp daemonproto.Response
		var result any
		var herr error
		if req.Payload != nil {
			result, herr = s.dispatchFrame(r.Peer, req.Op, req.Payload)
		} else {
			result, herr = s.dispatch(r, req.Op)
		}
		for _, f := range r.files {
			if f != nil {
				f.Close()
			}
		}
		if herr != nil {
			resp.Error = herr.Error()
			resp.Code = control.CodeOf(herr)
		} else {
			resp.OK = true
			if result != nil {
				b, merr := json.Marshal(result)
				if merr != nil {
					resp.OK, resp.Error = false, "encode result: "+merr.Error()
				} else {
					resp.Result = b
				}
			}
		}
		if mutating[req.Op] {
			s.logRequest(peer.UID, "uid %d pid %d: %s: %s", peer.UID, peer.PID, req.Op, okOr(herr))
			s.writeState()
		}
		_ = pc.SetDeadline(time.Now().Add(RequestTimeout))
		if err := s.answer(pc, peer.UID, req.Op, &resp); err != nil {
			return
		}
		if req.Op == daemonproto.OpShutdown && resp.OK {
			go s.Shutdown()
			return
		}
	}
}

// answer sends resp. One larger than a request is counted against the
// user's MaxAnswers while it is sent; one past it, or past MaxResponse, is
// answered with an error saying so.
func (s *Server) answer(pc *daemonproto.Conn, uid int, op string, resp *daemonproto.Response) error {
	b, err := json.Marshal(resp)
	if err != nil {
		b, _ = json.Marshal(&daemonproto.Response{Error: "encode result: " + err.Error()})
	}
	if len(b) >= daemonproto.MaxResponse {
		return pc.Send(&daemonproto.Response{Error: fmt.Sprintf("the result of %s is too large to send (%d bytes, at most %d): ask for less (one pid, fewer metrics)", op, len(b), daemonproto.MaxResponse)})
	}
	if len(b) > daemonproto.MaxRequest && uid != 0 {
		if !s.takeAnswer(uid, len(b)) {
			return pc.Send(&daemonproto.Response{Error: fmt.Sprintf("the result of %s (%d bytes) waits: uid %d's connections are being sent %d bytes of large answers, the most one user may (%d); read them first", op, len(b), uid, s.answersOf(uid), s.maxAnswers()), Code: control.ErrBusy.Code})
		}
		defer s.giveAnswer(uid, len(b))
	}
	return pc.SendLine(b)
}

func (s *Server) maxAnswers() int {
	if s.MaxAnswers > 0 {
		return s.MaxAnswers
	}
	return MaxAnswersPerUID
}

func (s *Server) takeAnswer(uid, n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answers.take(uid, n, s.maxAnswers())
}

func (s *Server) giveAnswer(uid, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers.give(uid, n)
}

func (s *Server) answersOf(uid int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answers.n[uid]
}

// logQuota is what one user's requests may still have logged.
type logQuota struct {
	left    int       // lines that may be logged now
	since   time.Time // when left was last refilled
	dropped int       // lines left out since the last one logged
}

// logRequest logs a line about uid's request, within uid's quota
// (LogBurstPerUID).
func (s *Server) logRequest(uid int, format string, args ...any) {
	if uid == 0 {
		s.logf(format, args...)
		return
	}
	ok, dropped := s.takeLogLine(uid, time.Now())
	if !ok {
		return
	}
	if dropped > 0 {
		s.logf("uid %d: %d lines about its requests were not logged (at most %d at once, then one per %v)", uid, dropped, LogBurstPerUID, LogEveryPerUID)
	}
	s.logf(format, args...)
}

// takeLogLine takes a line from uid's quota: whether it may be logged,
// and how many were left out before it.
func (s *Server) takeLogLine(uid int, now time.Time) (bool, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.logged[uid]
	if q == nil {
		if s.logged == nil {
			s.logged = map[int]*logQuota{}
		}
		q = &logQuota{left: LogBurstPerUID, since: now}
		s.logged[uid] = q
	}
	if n := int(now.Sub(q.since) / LogEveryPerUID); n > 0 {
		q.left = min(LogBurstPerUID, q.left+n)
		q.since = q.since.Add(time.Duration(n) * LogEveryPerUID)
	}
	if q.left == 0 {
		q.dropped++
		return false, 0
	}
	q.left--
	dropped := q.dropped
	q.dropped = 0
	return true, dropped
}

func okOr(err error) string {
	if err != nil {
		return "refused: " + err.Error()
	}
	return "done"
}

// mutating ops are logged with who asked, and update the state file.
var mutating = map[string]bool{
	daemonproto.OpInit: true, daemonproto.OpEnable: true, daemonproto.OpDisable: true,
	daemonproto.OpMode: true, daemonproto.OpRate: true, daemonproto.OpOn: true,
	daemonproto.OpOff: true, daemonproto.OpGet: true, daemonproto.OpFree: true,
	daemonproto.OpShutdown: true, daemonproto.OpOnWriteError: true, daemonproto.OpStackDepth: true,
	daemonproto.OpStackUnwind: true,
}

var facilityOps = map[string]bool{
	daemonproto.OpInit: true, daemonproto.OpEnable: true, daemonproto.OpDisable: true,
	daemonproto.OpMode: true, daemonproto.OpRate: true, daemonproto.OpOn: true,
	daemonproto.OpOff: true, daemonproto.OpGet: true, daemonproto.OpFree: true,
	daemonproto.OpHook: true, daemonproto.OpInfo: true, daemonproto.OpOnWriteError: true, daemonproto.OpStackDepth: true,
	daemonproto.OpStackUnwind: true,
}

// configOps change what the next or held trace records: only the user
// holding the facility (Facility.Claim) or root may run them.
var configOps = map[string]bool{
	daemonproto.OpInit: true, daemonproto.OpEnable: true, daemonproto.OpDisable: true,
	daemonproto.OpMode: true, daemonproto.OpRate: true, daemonproto.OpOn: true,
	daemonproto.OpOnWriteError: true, daemonproto.OpStackDepth: true, daemonproto.OpStackUnwind: true,
}

func decode(args json.RawMessage, v any) error {
	if len(args) == 0 {
		return errors.New("missing arguments")
	}
	if err := json.Unmarshal(args, v); err != nil {
		return fmt.Errorf("bad arguments: %w", err)
	}
	return nil
}

// checkBuffers refuses buffers larger than a user other than root may have
// the agent hold (MaxUserBuffers): 1 GB per CPU is allowed by the format,
// and a machine of many CPUs has not that many times 2 GB of memory.
func (s *Server) checkBuffers(cfg control.Config) error {
	need, err := s.Fac.BufferBytes(cfg)
	if err != nil {
		return err
	}
	limit := s.MaxUserBuffers
	if limit <= 0 {
		var si unix.Sysinfo_t
		if err := unix.Sysinfo(&si); err != nil {
			return fmt.Errorf("the machine's memory: %w", err)
		}
		limit = int64(uint64(si.Totalram) * uint64(si.Unit) / 2)
	}
	if need > limit {
		return control.Errorf(control.ErrBusy, "buffers of %d MB (trace and MTE buffer for each of %d CPUs) are more than a user other than root may have the agent hold, %d MB (half the machine's memory): give smaller sizes (swtrace init -t SIZE -m SIZE)",
			need>>20, s.Fac.CPUs(), limit>>20)
	}
	return nil
}

// mayControl: only the user who turned the held trace on, or root, may stop,
// write or free it.
func (s *Server) mayControl(p Peer) error {
	if owner := s.Fac.Owner(); owner >= 0 && p.UID != owner && !p.Root() {
		return control.Errorf(control.ErrNotOwner, "the trace belongs to uid %d, who configured the facility or turned it on: only that user or root may stop, write or free it", owner)
	}
	return nil
}

func (s *Server) dispatch(r *Request, op string) (any, error) {
	f := s.Fac
	if s.User && facilityOps[op] {
		return nil, errors.New("this is a user's own agent (pitraced --user): the trace facility without the kernel module needs the system pitraced, which runs as root (sudo swtrace ..., or ask for --group access)")
	}
	if configOps[op] {
		if err := f.Claim(r.UID, r.Root()); err != nil {
			return nil, err
		}
	}
	switch op {
	case daemonproto.OpPing:
		exe, _ := os.Readlink("/proc/self/exe")
		return daemonproto.PingResult{PID: os.Getpid(), Version: Version, Stale: strings.HasSuffix(exe, " (deleted)"),
			Busy: !f.Idle() || s.hostsWork()}, nil
	case daemonproto.OpInit:
		var a daemonproto.InitArgs
		if err := decode(r.Args, &a); err != nil {
			return nil, err
		}
		cfg := control.Config{TraceBufSize: a.TraceBufSize, MTEBufSize: a.MTEBufSize}
		if !r.Root() {
			if err := s.checkBuffers(cfg); err != nil {
				return nil, err
			}
		}
		return nil, f.Init(cfg)
	case daemonproto.OpEnable, daemonproto.OpDisable:
		var a daemonproto.MajorsArgs
		if err := decode(r.Args, &a); err != nil {
			return nil, err
		}
		if op == daemonproto.OpEnable {
			return nil, f.Enable(a.Majors)
		}
		return nil, f.Disable(a.Majors)
	case daemonproto.OpMode:
		var a daemonproto.ModeArgs
		if err := decode(r.Args, &a); err != nil {
			return nil, err
		}
		return nil, f.SetMode(a.Mode, a.File)
	case daemonproto.OpStackDepth:
		var a daemonproto.StackDepthArgs
		if err := decode(r.Args, &a); err != nil {
			return nil, err
		}
		return nil, f.SetStackDepth(a.Frames)
	case daemonproto.OpStackUnwind:
		var a control.Unwind
		if err := decode(r.Args, &a); err != nil {
			return nil, err
		}
		return nil, f.SetStackUnwind(a)
	case daemonproto.OpOnWriteError:
		var a daemonproto.WriteErrorArgs
		if err := decode(r.Args, &a); err != nil {
			return nil, err
		}
		return nil, f.SetStopOnWriteError(a.Stop)
	case daemonproto.OpRate:
		var a daemonproto.RateArgs
		if err := decode(r.Args, &a); err != nil {
			return nil, err
		}
		return nil, f.SetRate(a.Hz, a.Event)
	case daemonproto.OpOn:
		if !r.Root() && f.State() == control.StateFree {
			// on allocates the default buffers
			if err := s.checkBuffers(control.Config{}); err != nil {
				return nil, err
			}
		}
		file, err := r.clientFile(0)
		if err != nil {
			return nil, err
		}
		return nil, f.On(file, r.UID)
	case daemonproto.OpOff:
		if err := s.mayControl(r.Peer); err != nil {
			return nil, err
		}
		return nil, f.Off()
	case daemonproto.OpGet:
		if err := s.mayControl(r.Peer); err != nil {
			return nil, err
		}
		file, err := r.clientFile(0)
		if err != nil {
			return nil, err
		}
		return nil, f.Get(file)
	case daemonproto.OpInfo:
		return f.InfoFor(r.UID, r.Root())
	case daemonproto.OpFree:
		if err := s.mayControl(r.Peer); err != nil {
			return nil, err
		}
		return nil, f.Free()
	case daemonproto.OpHook:
		var a daemonproto.HookArgs
		if err := decode(r.Args, &a); err != nil {
			return nil, err
		}
		return nil, f.Hook(facility.Writer{UID: r.UID, Root: r.Root()}, a.CPU, a.Time, a.Major, a.Minor, a.Words, a.Str)
	case daemonproto.OpShutdown:
		if !r.Root() && !(s.User && r.UID == os.Getuid()) {
			return nil, control.Errorf(control.ErrRootOnly, "only root may shut the daemon down")
		}
		return nil, nil
	}
	s.mu.Lock()
	h := s.handlers[op]
	s.mu.Unlock()
	if h != nil {
		return h(r)
	}
	return nil, fmt.Errorf("unknown op %q", op)
}

// dispatchFrame serves a binary frame: only ops registered for frames.
func (s *Server) dispatchFrame(p Peer, op string, payload []byte) (any, error) {
	s.mu.Lock()
	h := s.frames[op]
	s.mu.Unlock()
	if h == nil {
		return nil, fmt.Errorf("op %q takes no binary frame", op)
	}
	return h(p, payload)
}

// LogSafe escapes every character of a log line that could end the line
// or pass for a separator in it: control characters, invalid UTF-8, and
// every rune unicode.IsPrint refuses (line and paragraph separators,
// non-ASCII spaces). A client's words in the agent's log stay inside the
// line they were logged in.
func LogSafe(line string) string {
	var b strings.Builder
	for i, r := range line {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(line[i:], "\uFFFD"):
			fmt.Fprintf(&b, `\x%02x`, line[i])
		case unicode.IsPrint(r):
			b.WriteRune(r)
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
	}
	return b.String()
}
