// Package daemonproto holds the pitraced control protocol: one JSON request
// per line on a Unix stream socket, one JSON response per line back.
package daemonproto

import (
	"encoding/json"
	"os"
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
}

// Response answers one request.
type Response struct {
	OK     bool            `json:"ok"`
	Error  string          `json:"error,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// Ops and their arguments.
const (
	OpPing     = "ping"
	OpInit     = "init"     // InitArgs
	OpEnable   = "enable"   // MajorsArgs
	OpDisable  = "disable"  // MajorsArgs
	OpMode     = "mode"     // ModeArgs
	OpRate     = "rate"     // RateArgs
	OpOn       = "on"       //
	OpOff      = "off"      //
	OpGet      = "get"      // GetArgs
	OpInfo     = "info"     // -> control.Status
	OpFree     = "free"     //
	OpHook     = "hook"     // HookArgs
	OpShutdown = "shutdown" // the daemon exits (after stopping tracing)
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
