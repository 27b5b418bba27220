// Package daemonclient is the trace facility backend served by the pitraced
// daemon over its Unix control socket. It starts the daemon when it is not
// running (root only) and reports a dead or unreachable daemon clearly
// instead of hanging.
package daemonclient

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/control"
	"perfinsp/libperfutil/daemonproto"
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
	conn net.Conn
	r    *bufio.Reader
	// Timeout bounds each request (get of a large trace can take a while).
	Timeout time.Duration
}

// Dial connects to the daemon, starting it if it is not running and we are root.
func Dial() (*Client, error) {
	path := daemonproto.SocketPath()
	c, err := connect(path)
	if err == nil {
		// A daemon whose binary was replaced (rebuilt, upgraded) and holds
		// nothing hands over to the new one.
		var ping daemonproto.PingResult
		if perr := c.Call(daemonproto.OpPing, nil, &ping); perr == nil && ping.Stale && !ping.Busy && os.Geteuid() == 0 {
			_ = c.Shutdown()
			c.Close()
			for i := 0; i < 50; i++ {
				if _, err := os.Stat(path); err != nil {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err := start(path); err != nil {
				return nil, err
			}
			return connect(path)
		}
		return c, nil
	}
	if os.Geteuid() != 0 {
		if errors.Is(err, syscall.EACCES) || errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("permission denied on %s: run swtrace as root (sudo), or ask the administrator to start pitraced with --group and add you to that group", path)
		}
		return nil, fmt.Errorf("pitraced is not running (%v) and only root can start it: run with sudo, or start the service (systemctl start pitraced)", err)
	}
	if err := start(path); err != nil {
		return nil, err
	}
	return connect(path)
}

func connect(path string) (*Client, error) {
	conn, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return nil, err
	}
	return &Client{path: path, conn: conn, r: bufio.NewReader(conn), Timeout: 5 * time.Minute}, nil
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

// start launches pitraced detached from this process and waits for its socket.
func start(path string) error {
	bin, err := daemonBinary()
	if err != nil {
		return err
	}
	logPath := filepath.Join(filepath.Dir(path), "pitraced.log")
	_ = os.MkdirAll(filepath.Dir(path), 0o755)
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		logf = nil
	}
	cmd := exec.Command(bin, "--socket", path, "--idle-exit", "30m")
	cmd.Env = os.Environ()
	cmd.Stdin = nil
	if logf != nil {
		cmd.Stdout, cmd.Stderr = logf, logf
		defer logf.Close()
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("pitraced exited at start (%v): see %s", err, logPath)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("pitraced did not open %s within 5 s: see %s", path, logPath)
}

// Call sends one request and decodes its result into out (may be nil).
func (c *Client) Call(op string, args any, out any) error {
	req := daemonproto.Request{Op: op}
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return fmt.Errorf("encode %s request: %w", op, err)
		}
		req.Args = b
	}
	b, err := json.Marshal(&req)
	if err != nil {
		return fmt.Errorf("encode %s request: %w", op, err)
	}
	_ = c.conn.SetDeadline(time.Now().Add(c.Timeout))
	if _, err := c.conn.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("pitraced (%s) is not answering: %w", c.path, err)
	}
	line, err := c.r.ReadBytes('\n')
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("pitraced did not answer %s within %s", op, c.Timeout)
		}
		return fmt.Errorf("pitraced closed the connection during %s (did it die? see %s): %w", op, filepath.Join(filepath.Dir(c.path), "pitraced.log"), err)
	}
	var resp daemonproto.Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return fmt.Errorf("bad answer from pitraced: %w", err)
	}
	if !resp.OK {
		return errors.New(resp.Error)
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

// SetMode selects the mode.
func (c *Client) SetMode(mode int, file string) error {
	if file != "" {
		abs, err := filepath.Abs(file)
		if err != nil {
			return err
		}
		file = abs
	}
	return c.Call(daemonproto.OpMode, daemonproto.ModeArgs{Mode: mode, File: file}, nil)
}

// SetRate sets the tprof rate.
func (c *Client) SetRate(hz int, event string) error {
	return c.Call(daemonproto.OpRate, daemonproto.RateArgs{Hz: hz, Event: event}, nil)
}

// On starts tracing.
func (c *Client) On() error { return c.Call(daemonproto.OpOn, nil, nil) }

// Off stops tracing.
func (c *Client) Off() error { return c.Call(daemonproto.OpOff, nil, nil) }

// Get writes the trace file.
func (c *Client) Get(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	return c.Call(daemonproto.OpGet, daemonproto.GetArgs{Path: abs}, nil)
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
