// Package daemonproto holds the pitraced control protocol: one JSON request
// per line on a Unix stream socket, one JSON response per line back.
package daemonproto

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// DefaultSocket is where pitraced listens unless told otherwise.
const DefaultSocket = "/run/perfinsp/pitraced.sock"

// EnvSocket overrides the socket path for clients and the daemon.
const EnvSocket = "PERFINSP_SOCKET"

// SocketPath returns the socket path in force.
func SocketPath() string {
	if p := os.Getenv(EnvSocket); p != "" {
		return p
	}
	return DefaultSocket
}

// Request is one control request.
type Request struct {
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args,omitempty"`
	// Payload is a binary frame's argument (FrameMagic; nil for a line).
	Payload []byte `json:"-"`
}

// Response answers one request. Code names the error's kind
// (control.Error codes) so that clients can rebuild a typed error.
type Response struct {
	OK     bool            `json:"ok"`
	Error  string          `json:"error,omitempty"`
	Code   string          `json:"code,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// State is what a daemon holds, written next to its socket at every change
// (StatePath) and removed when it exits cleanly. A client that finds the
// daemon gone but its state file present knows it died, and what with.
type State struct {
	PID      int       `json:"pid"`
	Group    string    `json:"group,omitempty"`
	IdleExit string    `json:"idle_exit,omitempty"`
	State    string    `json:"state"`
	Unsaved  bool      `json:"unsaved"` // tracing, or holding a trace never written
	Owner    int       `json:"owner_uid"`
	Time     time.Time `json:"time"`
}

// StatePath is the state file of the daemon listening on socket.
func StatePath(socket string) string { return socket + ".state" }

// Ops and their arguments.
const (
	OpPing         = "ping"
	OpInit         = "init"           // InitArgs
	OpEnable       = "enable"         // MajorsArgs
	OpDisable      = "disable"        // MajorsArgs
	OpMode         = "mode"           // ModeArgs
	OpRate         = "rate"           // RateArgs
	OpOn           = "on"             //
	OpOff          = "off"            //
	OpGet          = "get"            // GetArgs
	OpInfo         = "info"           // -> control.Status
	OpFree         = "free"           //
	OpHook         = "hook"           // HookArgs
	OpShutdown     = "shutdown"       // the daemon exits (after stopping tracing)
	OpOnWriteError = "on-write-error" // WriteErrorArgs
	OpStackDepth   = "stack-depth"    // StackDepthArgs
	OpStackUnwind  = "stack-unwind"   // control.Unwind
)

// InitArgs are the buffer sizes.
type InitArgs struct {
	TraceBufSize int `json:"trace_buf_size"`
	MTEBufSize   int `json:"mte_buf_size"`
}

// MajorsArgs lists major codes.
type MajorsArgs struct {
	Majors []uint16 `json:"majors"`
}

// ModeArgs sets the mode.
type ModeArgs struct {
	Mode int    `json:"mode"`
	File string `json:"file,omitempty"`
}

// RateArgs sets the tprof rate.
type RateArgs struct {
	Hz    int    `json:"hz"`
	Event string `json:"event,omitempty"`
}

// GetArgs names the output file (absolute).
type GetArgs struct {
	Path string `json:"path"`
}

// HookArgs is a user record.
type HookArgs struct {
	CPU   int      `json:"cpu"`
	Time  uint64   `json:"time"`
	Major uint16   `json:"major"`
	Minor uint32   `json:"minor"`
	Words []uint32 `json:"words,omitempty"`
	Str   string   `json:"str,omitempty"`
}

// WriteErrorArgs chooses what a stream write error does.
type WriteErrorArgs struct {
	Stop bool `json:"stop"`
}

// StackDepthArgs sets the call-stack depth limit.
type StackDepthArgs struct {
	Frames int `json:"frames"`
}

// PingResult identifies the daemon.
type PingResult struct {
	PID     int    `json:"pid"`
	Version string `json:"version"`
	// Stale is true when the daemon's binary was replaced on disk since it
	// started (a rebuild or an upgrade): a newer daemon should take over.
	Stale bool `json:"stale,omitempty"`
	// Busy is true when the daemon holds buffers (its state is not free).
	Busy bool `json:"busy,omitempty"`
}

// UserSocketPath is the socket of a user's own agent: the pitraced a user
// who cannot reach the system daemon runs as themselves, to host what must
// outlive a command (the ptt holder, the module's stream drainer). It lives
// in $XDG_RUNTIME_DIR/perfinsp, else in $TMPDIR/perfinsp-UID; the directory
// is created 0700 and, if it exists, must be a real directory owned by the
// user with no access for others (one planted by another user in a
// world-writable directory is refused, never used or chmod-ed).
func UserSocketPath() (string, error) {
	uid := os.Getuid()
	var dir string
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" && privateDir(x, uid) == nil {
		dir = filepath.Join(x, "perfinsp")
	} else {
		dir = filepath.Join(os.TempDir(), fmt.Sprintf("perfinsp-%d", uid))
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	if err := privateDir(dir, uid); err != nil {
		return "", err
	}
	return filepath.Join(dir, "pitraced.sock"), nil
}

// privateDir checks that dir is a directory (not a link) owned by uid with
// no permissions for group or others.
func privateDir(dir string, uid int) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&os.ModeSymlink != 0 || !fi.IsDir():
		return fmt.Errorf("%s is not a directory: refusing to use it for the agent's socket (remove it, or set XDG_RUNTIME_DIR)", dir)
	case !ok || int(st.Uid) != uid:
		return fmt.Errorf("%s belongs to uid %d, not to you (uid %d): refusing to use it for the agent's socket (another user may have planted it; remove it, or set XDG_RUNTIME_DIR)", dir, st.Uid, uid)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("%s has mode %o: others may use it; refusing it for the agent's socket (chmod 700 it, or remove it)", dir, fi.Mode().Perm())
	}
	return nil
}
