// Package server is pitraced's control socket: it accepts connections on a
// Unix socket (root-only by default, or a group's), reads one JSON request
// per line and answers from the trace facility or from handlers other
// parts of the daemon register.
package server

import (
	"bufio"
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

	"golang.org/x/sys/unix"

	"perfinsp/daemon/facility"
	"perfinsp/libperfutil/control"
	"perfinsp/libperfutil/daemonproto"
)

// Version of the daemon protocol.
const Version = "1"

// Peer identifies the connected client.
type Peer struct {
	PID, UID, GID int
}

// Handler serves one extra op. args is the request's raw arguments.
type Handler func(p Peer, args json.RawMessage) (any, error)

// Server serves the control socket.
type Server struct {
	Fac      *facility.Facility
	Path     string
	Group    string        // if set, members of this group may connect
	IdleExit time.Duration // exit after this long with nothing traced (0: never)
	Log      func(format string, args ...any)

	mu       sync.Mutex
	handlers map[string]Handler
	ln       *net.UnixListener
	last     time.Time
	done     chan struct{}
	once     sync.Once
}

// Handle registers an extra op.
func (s *Server) Handle(op string, h Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.handlers == nil {
		s.handlers = map[string]Handler{}
	}
	s.handlers[op] = h
}

func (s *Server) logf(format string, args ...any) {
	if s.Log != nil {
		s.Log(format, args...)
	}
}

// Listen creates the socket with the right owner and permissions.
func (s *Server) Listen() error {
	if err := os.MkdirAll(filepath.Dir(s.Path), 0o755); err != nil {
		return fmt.Errorf("create socket directory: %w", err)
	}
	// A socket left by a dead daemon is removed; a live daemon is an error.
	if c, err := net.DialTimeout("unix", s.Path, 500*time.Millisecond); err == nil {
		c.Close()
		return fmt.Errorf("another pitraced is already listening on %s", s.Path)
	}
	_ = os.Remove(s.Path)
	old := unix.Umask(0o177)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: s.Path, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.Path, err)
	}
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
	return nil
}

// Serve accepts connections until Shutdown.
func (s *Server) Serve() error {
	if s.IdleExit > 0 {
		go s.idleWatch()
	}
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			select {
			case <-s.done:
				return nil
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		go s.serveConn(c)
	}
}

// Shutdown stops tracing, closes the socket and makes Serve return.
func (s *Server) Shutdown() {
	s.once.Do(func() {
		if st := s.Fac.State(); st == control.StateOn {
			_ = s.Fac.Off()
		}
		close(s.done)
		if s.ln != nil {
			s.ln.Close()
		}
		_ = os.Remove(s.Path)
	})
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
		if s.Fac.Idle() && idle > s.IdleExit {
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

func (s *Server) serveConn(c *net.UnixConn) {
	defer c.Close()
	peer := peerOf(c)
	r := bufio.NewReaderSize(c, 64<<10)
	enc := json.NewEncoder(c)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) == 0 && err != nil {
			return
		}
		s.mu.Lock()
		s.last = time.Now()
		s.mu.Unlock()
		var req daemonproto.Request
		var resp daemonproto.Response
		if jerr := json.Unmarshal(line, &req); jerr != nil {
			resp.Error = "bad request: " + jerr.Error()
		} else {
			result, herr := s.dispatch(peer, &req)
			if herr != nil {
				resp.Error = herr.Error()
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
		}
		if err := enc.Encode(&resp); err != nil {
			return
		}
		if req.Op == daemonproto.OpShutdown && resp.OK {
			go s.Shutdown()
			return
		}
	}
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

func (s *Server) dispatch(p Peer, req *daemonproto.Request) (any, error) {
	f := s.Fac
	switch req.Op {
	case daemonproto.OpPing:
		exe, _ := os.Readlink("/proc/self/exe")
		return daemonproto.PingResult{PID: os.Getpid(), Version: Version, Stale: strings.HasSuffix(exe, " (deleted)"),
			Busy: f.State() != control.StateFree}, nil
	case daemonproto.OpInit:
		var a daemonproto.InitArgs
		if err := decode(req.Args, &a); err != nil {
			return nil, err
		}
		return nil, f.Init(control.Config{TraceBufSize: a.TraceBufSize, MTEBufSize: a.MTEBufSize})
	case daemonproto.OpEnable, daemonproto.OpDisable:
		var a daemonproto.MajorsArgs
		if err := decode(req.Args, &a); err != nil {
			return nil, err
		}
		if req.Op == daemonproto.OpEnable {
			return nil, f.Enable(a.Majors)
		}
		return nil, f.Disable(a.Majors)
	case daemonproto.OpMode:
		var a daemonproto.ModeArgs
		if err := decode(req.Args, &a); err != nil {
			return nil, err
		}
		return nil, f.SetMode(a.Mode, a.File)
	case daemonproto.OpRate:
		var a daemonproto.RateArgs
		if err := decode(req.Args, &a); err != nil {
			return nil, err
		}
		return nil, f.SetRate(a.Hz, a.Event)
	case daemonproto.OpOn:
		return nil, f.On()
	case daemonproto.OpOff:
		return nil, f.Off()
	case daemonproto.OpGet:
		var a daemonproto.GetArgs
		if err := decode(req.Args, &a); err != nil {
			return nil, err
		}
		return nil, f.Get(a.Path, p.UID, p.GID)
	case daemonproto.OpInfo:
		return f.Info()
	case daemonproto.OpFree:
		return nil, f.Free()
	case daemonproto.OpHook:
		var a daemonproto.HookArgs
		if err := decode(req.Args, &a); err != nil {
			return nil, err
		}
		return nil, f.Hook(a.CPU, a.Time, a.Major, a.Minor, a.Words, a.Str)
	case daemonproto.OpShutdown:
		return nil, nil
	}
	s.mu.Lock()
	h := s.handlers[req.Op]
	s.mu.Unlock()
	if h != nil {
		return h(p, req.Args)
	}
	return nil, fmt.Errorf("unknown op %q", req.Op)
}
