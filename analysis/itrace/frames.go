package itrace

// FrameEvent is one change of a traced thread's call stack, as the replay
// makes it (OnFrame): a frame opened or closed. The frames of a thread
// nest: each close ends the innermost open frame of its thread.
type FrameEvent struct {
	PID, TID uint32
	Time     uint64 // the time of the record that made it (Finish: the last record's)
	Begin    bool
	Kind     FrameKind
	Func     Func // Begin: the function entered
	// Instructions is, at a close, the activation's inclusive
	// instructions (its own and those of what it called).
	Instructions uint64
}

// FrameKind tells what opened a frame.
type FrameKind uint8

const (
	// FrameCall is a call: one of the function's Calls (a call
	// instruction, a call through a PLT stub once it leaves the stub, a
	// jump to a function's entry).
	FrameCall FrameKind = iota
	// FrameSignal is a signal handler's entry (not a call).
	FrameSignal
	// FrameBase is the function a thread runs in with no frame open (the
	// bottom of its stack: where its trace began, or what it returned
	// to below that).
	FrameBase
)

// String names the kind.
func (k FrameKind) String() string {
	switch k {
	case FrameCall:
		return "call"
	case FrameSignal:
		return "signal"
	}
	return "base"
}

// OnFrame makes the replay call fn at every frame opened and closed, in
// the order of the records (call it before the first Apply). fn must not
// keep the event.
func (rep *Report) OnFrame(fn func(*FrameEvent)) { rep.onFrame = fn }

func (rep *Report) frameEvent(th *threadState, begin bool, kind FrameKind, f Func, instructions uint64) {
	rep.ev = FrameEvent{PID: th.pid, TID: th.tid, Time: rep.now, Begin: begin, Kind: kind, Func: f, Instructions: instructions}
	rep.onFrame(&rep.ev)
}
