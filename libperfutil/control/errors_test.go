package control

import (
	"errors"
	"fmt"
	"testing"

	"perfinsp/libperfutil/events"
)

// TestNoPMUSurvivesTheSocket: an error wrapping events.ErrNoPMU keeps
// matching it after the agent sends its code and the client rebuilds it,
// so a tool asks errors.Is(err, events.ErrNoPMU) whichever backend ran.
func TestNoPMUSurvivesTheSocket(t *testing.T) {
	local := fmt.Errorf("%w: event-based tprof needs a hardware counter", events.ErrNoPMU)
	code := CodeOf(local)
	if code != codeNoPMU {
		t.Fatalf("CodeOf(%v) = %q, want %q", local, code, codeNoPMU)
	}
	remote := error(&Error{Code: code, Msg: "pitraced: " + local.Error()})
	if !errors.Is(remote, events.ErrNoPMU) {
		t.Fatalf("the rebuilt error %v does not match events.ErrNoPMU", remote)
	}
	if errors.Is(&Error{Code: "busy", Msg: "x"}, events.ErrNoPMU) || errors.Is(remote, ErrBusy) {
		t.Fatal("codes match across kinds")
	}
	if CodeOf(errors.New("other")) != "" {
		t.Fatal("a plain error has a code")
	}
}
