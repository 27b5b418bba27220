package server

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"perfinsp/daemon/facility"
	"perfinsp/internal/daemonproto"
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
