// Package daemonclient is the trace facility backend served by the pitraced
// daemon over its Unix control socket. It starts the daemon when it is not
// running (root only) and reports a dead or unreachable daemon clearly
// instead of hanging.
package daemonclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"perfinsp/internal/daemonproto"
	"perfinsp/libperfutil/control"
)

// EnvDaemon names the pitraced binary to start (default: pitraced next to
// the running program, then $PATH).
const EnvDaemon = "PERFINSP_PITRACED"

func init() {
	control.Register(control.Opener{
		Name:     "daemon",
		Priority: 10,
		Available: func() (bool, string) {
			return true, ""
		},
		Open: func() (control.Facility, error) { return Dial() },
	})
}

// Client talks to pitraced.
type Client struct {
	path string
	conn *daemonproto.Conn
	// Timeout bounds each quick request; long ones (on, off, get, free:
	// they write files) get LongTimeout.
	Timeout, LongTimeout time.Duration
	notices              []string
}

// EnvTimeout overrides QuickTimeout (a Go duration, e.g. 3s).
const EnvTimeout = "PERFINSP_TIMEOUT"

// Request time limits: a stopped or wedged daemon is reported in seconds.
const (
	QuickTimeout = 10 * time.Second
	LongTimeout  = 5 * time.Minute
)

// Notices returns what the client found out while connecting that the
// user must be told (a daemon that died holding a trace).
func (c *Client) Notices() []string { return c.notices }

// Dial connects to the daemon, starting it if it is not running and we are
// root. A daemon found dead is reported (with the trace it held) and its
// successor is started with the same idle exit (its group comes from
// PERFINSP_GROUP only). A socket in a directory another user could write
// is refused.
func Dial() (*Client, error) {
	path := daemonproto.SocketPath()
	// A socket in a directory another user can write may be theirs (a
	// fake agent receiving your files), and so may a state file there.
	if err := daemonproto.CheckAgentPath(filepath.Dir(path), 0); err != nil {
		return nil, fmt.Errorf("refusing the agent socket %s: %w", path, err)
	}
	c, err := connect(path)
	if err == nil {
		// A daemon whose binary was replaced (rebuilt, upgraded) and holds
		// nothing hands over to the new one.
		var ping daemonproto.PingResult
		perr := c.Call(daemonproto.OpPing, nil, &ping)
		if perr != nil {
			c.Close()
			if !dying(perr) || !released(path) {
				return nil, perr
			}
			// It died as we connected (a killed daemon's last thread
			// still held its socket): as a daemon found dead.
			return dialDead(path, perr)
		}
		if ping.Stale && !ping.Busy && os.Geteuid() == 0 {
			prev := readState(path)
			_ = c.Shutdown()
			c.Close()
			for i := 0; i < 50; i++ {
				if _, err := os.Stat(path); err != nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err := start(path, prev); err != nil {
				return nil, err
			}
			return connect(path)
		}
		return c, err
	}
	return dialDead(path, err)
}

// dialDead is Dial once no daemon answers on path (err: why): the death of
// the one the state file names is reported, and root starts a successor.
func dialDead(path string, err error) (*Client, error) {
	prev := readState(path)
	var notices []string
	if prev != nil && !alive(prev.PID) {
		notices = append(notices, deathNotice(prev))
	}
	if os.Geteuid() != 0 {
		msg := ""
		if len(notices) > 0 {
			msg = notices[0] + "; "
		}
		if errors.Is(err, syscall.EACCES) || errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("%spermission denied on %s: run swtrace as root (sudo), or ask the administrator to start pitraced with --group and add you to that group", msg, path)
		}
		return nil, fmt.Errorf("%spitraced is not running (%v) and only root can start it: run with sudo, or start the service (systemctl start pitraced)", msg, err)
	}
	if err := startDaemon(path, prev); err != nil {
		return nil, err
	}
	c, err := connect(path)
	if c != nil {
		c.notices = notices
	}
	return c, err
}

// dying is whether a request's error says the daemon closed or reset the
// connection (not that it refused the request or is slow).
func dying(err error) bool {
	return errors.Is(err, daemonproto.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// released waits up to two seconds for path to refuse connections: the
// daemon behind it has gone (false: something still listens there).
func released(path string) bool {
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		c, err := net.DialTimeout("unix", path, 200*time.Millisecond)
		if err != nil {
			return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, os.ErrNotExist)
		}
		c.Close()
	}
	return false
}

func deathNotice(st *daemonproto.State) string {
	what := "it held no trace"
	switch {
	case st.State == control.StateOn:
		what = "it was tracing: that trace was lost"
	case st.Unsaved:
		what = "it held a trace that was never written: that trace was lost"
	}
	msg := fmt.Sprintf("the previous pitraced (pid %d) ended without shutting down (killed or crashed) at or after %s; %s",
		st.PID, st.Time.Format("15:04:05"), what)
	if st.Group != "" && os.Getenv(EnvGroup) != st.Group {
		msg += fmt.Sprintf("; it served group %q, the one started now does not (a group never comes from a file): set %s=%s or run the service", st.Group, EnvGroup, st.Group)
	}
	return msg
}

// readState reads the system agent's state file: only root's, in a
// directory only root can write (daemonproto.ReadState).
func readState(sock string) *daemonproto.State { return daemonproto.ReadState(sock, 0) }

// EnvGroup names the group whose members may use a system agent that
// swtrace starts on demand (pitraced --group). It comes from root's
// environment only: never from a file another user might have written.
const EnvGroup = "PERFINSP_GROUP"

func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

func connect(path string) (*Client, error) {
	conn, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return nil, err
	}
	quick := QuickTimeout
	if v, err := time.ParseDuration(os.Getenv(EnvTimeout)); err == nil && v > 0 {
		quick = v
	}
	pc := daemonproto.NewConn(conn.(*net.UnixConn))
	pc.MaxLine = daemonproto.MaxResponse
	return &Client{path: path, conn: pc, Timeout: quick, LongTimeout: LongTimeout}, nil
}

func daemonBinary() (string, error) {
	if p := os.Getenv(EnvDaemon); p != "" {
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "pitraced")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("pitraced")
	if err != nil {
		return "", errors.New("cannot find the pitraced binary next to this program or in $PATH (set " + EnvDaemon + ")")
	}
	return p, nil
}

// startDaemon starts the successor of a daemon found dead (a variable: the
// tests give a stand-in).
var startDaemon = start

// start launches pitraced detached from this process and waits for its
// socket. A predecessor's idle exit is kept; the group is PERFINSP_GROUP's,
// never the state file's.
func start(path string, prev *daemonproto.State) error {
	bin, err := daemonBinary()
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	logPath := filepath.Join(dir, "pitraced.log")
	if err := daemonproto.CheckAgentPath(dir, 0); err != nil {
		return fmt.Errorf("refusing to start pitraced on %s: %w", path, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := daemonproto.CheckAgentDir(dir, 0); err != nil {
		return fmt.Errorf("refusing to start pitraced on %s: %w", path, err)
	}
	logf, err := daemonproto.OpenAgentFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600, 0)
	if err != nil {
		return fmt.Errorf("pitraced's log: %w", err)
	}
	defer logf.Close()
	args := []string{"--socket", path, "--idle-exit", "30m"}
	if g := os.Getenv(EnvGroup); g != "" {
		args = append(args, "--group", g)
	}
	if prev != nil && prev.IdleExit != "" {
		if d, err := time.ParseDuration(prev.IdleExit); err == nil && d >= 0 {
			args[3] = d.String()
		}
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = os.Environ()
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return waitSocket(path, logPath, exited)
}

var longOps = map[string]bool{daemonproto.OpOn: true, daemonproto.OpOff: true, daemonproto.OpGet: true, daemonproto.OpFree: true, daemonproto.OpShutdown: true}

// Call sends one request, with files the daemon is to use (opened here, with
// this process's rights), and decodes its result into out (may be nil).
// Errors from the daemon keep their kind (errors.Is with control's errors).
func (c *Client) Call(op string, args any, out any, files ...*os.File) error {
	req := daemonproto.Request{Op: op}
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return fmt.Errorf("encode %s request: %w", op, err)
		}
		req.Args = b
	}
	limit := c.Timeout
	if longOps[op] {
		limit = c.LongTimeout
	}
	_ = c.conn.SetDeadline(time.Now().Add(limit))
	if err := c.conn.Send(&req, files...); err != nil {
		return fmt.Errorf("pitraced (%s) is not answering: %w", c.path, err)
	}
	var resp daemonproto.Response
	if _, err := c.conn.Receive(&resp); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("pitraced did not answer %s within %s: is it stopped (kill -CONT) or overloaded? (%s)", op, limit, c.path)
		}
		return fmt.Errorf("pitraced closed the connection during %s (did it die? see %s): %w", op, filepath.Join(filepath.Dir(c.path), "pitraced.log"), err)
	}
	if !resp.OK {
		if resp.Code != "" {
			return &control.Error{Code: resp.Code, Msg: "pitraced: " + resp.Error}
		}
		if strings.HasPrefix(resp.Error, "unknown op ") {
			exe := "an older binary"
			var ping daemonproto.PingResult
			if c.Call(daemonproto.OpPing, nil, &ping) == nil {
				if p, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", ping.PID)); err == nil {
					exe = fmt.Sprintf("pid %d, %s", ping.PID, p)
				}
			}
			return fmt.Errorf("pitraced: %s: the daemon serving %s (%s) is older than this tool: stop it when no trace is held (kill it; the next command starts this build's)", resp.Error, c.path, exe)
		}
		return errors.New("pitraced: " + resp.Error)
	}
	if out != nil && len(resp.Result) > 0 {
		if err := json.Unmarshal(resp.Result, out); err != nil {
			return fmt.Errorf("bad %s result from pitraced: %w", op, err)
		}
	}
	return nil
}

// Backend names the backend.
func (c *Client) Backend() string { return "daemon" }

// Init allocates buffers.
func (c *Client) Init(cfg control.Config) error {
	return c.Call(daemonproto.OpInit, daemonproto.InitArgs{TraceBufSize: cfg.TraceBufSize, MTEBufSize: cfg.MTEBufSize}, nil)
}

// Enable turns record types on.
func (c *Client) Enable(majors []uint16) error {
	return c.Call(daemonproto.OpEnable, daemonproto.MajorsArgs{Majors: majors}, nil)
}

// Disable turns record types off.
func (c *Client) Disable(majors []uint16) error {
	return c.Call(daemonproto.OpDisable, daemonproto.MajorsArgs{Majors: majors}, nil)
}

// SetMode selects the mode. The stream file of wrap and cont modes is
// checked here, with this process's rights; on opens it.
func (c *Client) SetMode(mode int, file string) error {
	if file != "" {
		abs, err := filepath.Abs(file)
		if err != nil {
			return err
		}
		if err := control.CheckTraceTarget(abs); err != nil {
			return err
		}
		file = abs
	}
	return c.Call(daemonproto.OpMode, daemonproto.ModeArgs{Mode: mode, File: file}, nil)
}

// SetStopOnWriteError chooses whether a stream write error stops tracing.
func (c *Client) SetStopOnWriteError(stop bool) error {
	return c.Call(daemonproto.OpOnWriteError, daemonproto.WriteErrorArgs{Stop: stop}, nil)
}

// SetStackDepth sets the call-stack depth limit.
func (c *Client) SetStackDepth(frames int) error {
	return c.Call(daemonproto.OpStackDepth, daemonproto.StackDepthArgs{Frames: frames}, nil)
}

// SetStackUnwind chooses how user stacks are unwound (frame pointers or
// call-frame information).
func (c *Client) SetStackUnwind(u control.Unwind) error {
	return c.Call(daemonproto.OpStackUnwind, u, nil)
}

// SetRate sets the tprof rate.
func (c *Client) SetRate(hz int, event string) error {
	return c.Call(daemonproto.OpRate, daemonproto.RateArgs{Hz: hz, Event: event}, nil)
}

// On starts tracing. In wrap and cont modes the stream file is created here,
// with this process's rights, and passed to the daemon.
func (c *Client) On() error {
	st, err := c.Info()
	if err != nil {
		return err
	}
	if st.Mode == control.ModeNormal || st.State == control.StateOn {
		return c.Call(daemonproto.OpOn, nil, nil)
	}
	if st.ContFile == "" {
		// The agent shows a stream file's name only to the user who named
		// it: this one was set by another user before you held the facility.
		m := control.ModeName(st.Mode)
		return fmt.Errorf("%s mode streams to a file you name: run `swtrace mode %s -f FILE` first", m, m)
	}
	f, err := control.CreateTraceFile(st.ContFile)
	if err != nil {
		return fmt.Errorf("stream file: %w", err)
	}
	defer f.Close()
	return c.Call(daemonproto.OpOn, nil, nil, f)
}

// Off stops tracing.
func (c *Client) Off() error { return c.Call(daemonproto.OpOff, nil, nil) }

// Get writes the trace file: created here with this process's rights (mode
// 0600) and passed to the daemon, which writes into it. Getting a streamed
// trace to its own stream file completes it in place.
func (c *Client) Get(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	st, err := c.Info()
	if err != nil {
		return err
	}
	if st.Mode != control.ModeNormal && st.ContFile != "" && sameFile(abs, st.ContFile) {
		return c.Call(daemonproto.OpGet, daemonproto.GetArgs{}, nil)
	}
	switch st.State {
	case control.StateOn:
		return control.Errorf(control.ErrTracingOn, "tracing is on: run `swtrace off` first (get does not snapshot a running trace)")
	case control.StateFree, control.StateInitialized:
		return control.ErrNoTrace
	}
	f, err := control.CreateTraceFile(abs)
	if err != nil {
		return err
	}
	defer f.Close()
	return c.Call(daemonproto.OpGet, daemonproto.GetArgs{Path: abs}, nil, f)
}

// sameFile says whether the paths a and b name one file: the same name, or
// another name (a link, a directory reached by a link) of the same file.
// Creating a trace file at another name of the stream file would empty
// the stream.
func sameFile(a, b string) bool {
	if a == b {
		return true
	}
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// Info reports the state.
func (c *Client) Info() (*control.Status, error) {
	var st control.Status
	if err := c.Call(daemonproto.OpInfo, nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Free releases the buffers.
func (c *Client) Free() error { return c.Call(daemonproto.OpFree, nil, nil) }

// Hook writes a user record, stamped now on the calling CPU.
func (c *Client) Hook(major uint16, minor uint32, words []uint32, str string) error {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	cpu := 0
	var cpuv, node uint32
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptrOf(&cpuv), uintptrOf(&node), 0); e == 0 {
		cpu = int(cpuv)
	}
	return c.Call(daemonproto.OpHook, daemonproto.HookArgs{CPU: cpu, Time: uint64(ts.Sec)*1e9 + uint64(ts.Nsec), Major: major, Minor: minor, Words: words, Str: str}, nil)
}

// Shutdown asks the daemon to exit.
func (c *Client) Shutdown() error { return c.Call(daemonproto.OpShutdown, nil, nil) }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// DialAgent connects to the agent that hosts what must outlive a command
// (the ptt holder, the module's stream drainer): the system pitraced when
// this process can reach it (or, as root, start it), else the user's own
// pitraced (started on demand, running as the user; see
// daemonproto.UserSocketPath). The agent only ever acts on descriptors the
// caller opened and on processes the caller may observe.
func DialAgent() (*Client, error) {
	sys := daemonproto.SocketPath()
	// A system socket in a directory another user can write is never
	// used (it may be theirs): root is told so by Dial, another user falls
	// back to an agent of their own.
	sysSafe := daemonproto.CheckAgentPath(filepath.Dir(sys), 0) == nil
	if sysSafe {
		if c, err := connect(sys); err == nil {
			return c, nil
		}
	}
	if os.Geteuid() == 0 {
		return Dial()
	}
	path, err := daemonproto.UserSocketPath()
	if err != nil {
		return nil, err
	}
	if c, err := connect(path); err == nil {
		return c, nil
	}
	_ = os.Remove(path) // a socket left by a dead agent of ours
	if err := startUser(path); err != nil {
		return nil, err
	}
	return connect(path)
}

// startUser starts the user's own agent.
func startUser(path string) error {
	bin, err := daemonBinary()
	if err != nil {
		return err
	}
	logPath := filepath.Join(filepath.Dir(path), "pitraced.log")
	logf, err := daemonproto.OpenAgentFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600, os.Getuid())
	if err != nil {
		return fmt.Errorf("agent log %s: %w", logPath, err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--user", "--socket", path, "--idle-exit", "1m")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return waitSocket(path, logPath, exited)
}

// startWait bounds the wait for a started agent to open its socket. An
// agent starts in well under a second; on a machine busy enough to hold a
// new process from its CPU (or in an emulated guest) it takes longer, and
// the caller is told after startNotice that it is still waiting.
var startWait, startNotice = 2 * time.Minute, 5 * time.Second

// noticeTo takes the notice (a variable for the tests).
var noticeTo io.Writer = os.Stderr

// waitSocket waits until the agent started on path opens it, or exits.
func waitSocket(path, logPath string, exited <-chan error) error {
	start := time.Now()
	told := false
	for time.Since(start) < startWait {
		if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		if !told && time.Since(start) >= startNotice {
			told = true
			fmt.Fprintf(noticeTo, "%s: waiting for pitraced to open %s (a busy machine; its log: %s)\n", filepath.Base(os.Args[0]), path, logPath)
		}
		select {
		case err := <-exited:
			return fmt.Errorf("pitraced exited at start (%v): see %s", err, logPath)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("pitraced did not open %s within %v: see %s", path, startWait, logPath)
}

// Connect connects to the daemon listening on path, starting none: for
// commands about a daemon that runs (swtrace daemon stop).
func Connect(path string) (*Client, error) { return connect(path) }

// Ping asks the daemon who it is and whether it holds work.
func (c *Client) Ping() (*daemonproto.PingResult, error) {
	var p daemonproto.PingResult
	if err := c.Call(daemonproto.OpPing, nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}
