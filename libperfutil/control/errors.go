package control

import (
	"errors"
	"fmt"

	"perfinsp/libperfutil/events"
)

// Error is a facility error with a code that survives the daemon's socket:
// the daemon sends the code with the message, the client rebuilds an Error
// with the same code, and errors.Is matches on the code on both sides.
type Error struct {
	Code string
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Is matches any Error with the same code; an Error with the no-PMU code
// (as the agent's answer rebuilds it) also matches events.ErrNoPMU, the
// one no-PMU error.
func (e *Error) Is(target error) bool {
	if t, ok := target.(*Error); ok {
		return t.Code == e.Code
	}
	return e.Code == codeNoPMU && target == events.ErrNoPMU
}

// codeNoPMU is the wire code of errors wrapping events.ErrNoPMU.
const codeNoPMU = "no-pmu"

// The facility's typed errors. Backends return these (wrapped or with a
// more specific message through Errorf) so tools can tell them apart.
var (
	ErrUnsaved   = &Error{"unsaved", "the buffers hold a trace that was not written yet: run `swtrace get` first, or `swtrace on --discard` to drop it"}
	ErrTracingOn = &Error{"tracing-on", "tracing is on: run `swtrace off` first"}
	ErrNotOn     = &Error{"not-on", "tracing is not on"}
	ErrNoTrace   = &Error{"no-trace", "there is no trace to write: run `swtrace on` and `swtrace off` first"}
	ErrNotOwner  = &Error{"not-owner", "the trace belongs to another user"}
	ErrRootOnly  = &Error{"root-only", "only root may do this"}
	ErrBusy      = &Error{"busy", "the daemon is busy"}
	ErrBadFile   = &Error{"bad-file", "not a regular file"}
)

// Errorf returns an error of kind's code with its own message.
func Errorf(kind *Error, format string, args ...any) error {
	return &Error{Code: kind.Code, Msg: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of the first Error in err's chain ("no-pmu" for
// an error wrapping events.ErrNoPMU), or "".
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	if errors.Is(err, events.ErrNoPMU) {
		return codeNoPMU
	}
	return ""
}
