package server

import (
	"errors"
	"testing"

	"perfinsp/daemon/facility"
	"perfinsp/libperfutil/control"
	"perfinsp/libperfutil/daemonproto"
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
