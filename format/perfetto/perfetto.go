// Package perfetto writes Perfetto's protobuf trace format: a Trace
// message (protos/perfetto/trace/trace.proto), that is a stream of
// TracePacket messages, each written as field 1 of Trace as it is made.
// ui.perfetto.dev and trace_processor open it.
//
// What it writes: per-CPU scheduling as ftrace events (sched_switch,
// sched_waking, sched_wakeup_new, task_newtask, sched_process_exit in
// FtraceEventBundles, one bundle per CPU every few thousand events), from
// which Perfetto makes its CPU tracks and thread states; the threads and
// processes (ProcessTree packets, TrackDescriptors with Thread- and
// ProcessDescriptors); and TrackEvents on thread and named tracks:
// slices (TYPE_SLICE_BEGIN/END) and instants, with interned names,
// categories, debug-annotation names and string values, and call stacks
// (InternedData frames and callstacks, referred to by callstack_iid).
// Everything is on one packet sequence whose interned data is cleared by
// its first packet.
//
// The encoder is written by hand on google.golang.org/protobuf's
// protowire, with the field numbers of Perfetto's published .proto files
// (named at each message below): no Go package of Perfetto's protos is
// published as a module to depend on, and the few messages written here
// do not need generated code's reflection or its size.
//
// Memory: a packet is made in a buffer and written at once to a buffered
// writer; what stays is the interning tables (one entry per distinct
// name, frame, call stack and track) and each CPU's pending bundle.
package perfetto

import (
	"bufio"
	"io"

	"google.golang.org/protobuf/encoding/protowire"

	"perfinsp/format/internal/calltree"
	"perfinsp/format/traceevent"
)

// Field numbers, by message and .proto file (protos/perfetto/...).
const (
	// trace/trace.proto: Trace
	fTracePacket = 1

	// trace/trace_packet.proto: TracePacket
	fPktFtraceEvents     = 1
	fPktProcessTree      = 2
	fPktTimestamp        = 8
	fPktSequenceID       = 10 // trusted_packet_sequence_id
	fPktTrackEvent       = 11
	fPktInternedData     = 12
	fPktSequenceFlags    = 13
	fPktTrackDescriptor  = 60
	seqIncrementalClear  = 1  // SEQ_INCREMENTAL_STATE_CLEARED
	seqNeedsIncremental  = 2  // SEQ_NEEDS_INCREMENTAL_STATE
	fTrackEventType      = 9  // track_event/track_event.proto: TrackEvent
	fTrackEventTrackUUID = 11 //
	fTrackEventNameIID   = 10 //
	fTrackEventCatIIDs   = 3  // category_iids
	fTrackEventDebug     = 4  // debug_annotations
	fTrackEventStackIID  = 56 // callstack_iid
	typeSliceBegin       = 1  // TrackEvent.Type
	typeSliceEnd         = 2
	typeInstant          = 3

	// track_event/debug_annotation.proto: DebugAnnotation
	fDebugNameIID        = 1
	fDebugUint           = 3
	fDebugStringValueIID = 17

	// track_event/track_descriptor.proto: TrackDescriptor
	fTrackUUID    = 1
	fTrackName    = 2
	fTrackProcess = 3
	fTrackThread  = 4
	fTrackParent  = 5
	// track_event/process_descriptor.proto: ProcessDescriptor
	fProcPID  = 1
	fProcName = 6
	// track_event/thread_descriptor.proto: ThreadDescriptor
	fThreadPID  = 1
	fThreadTID  = 2
	fThreadName = 5

	// interned_data/interned_data.proto: InternedData
	fInternCategories   = 1  // EventCategory (track_event.proto): iid 1, name 2
	fInternEventNames   = 2  // EventName (track_event.proto): iid 1, name 2
	fInternDebugNames   = 3  // DebugAnnotationName (debug_annotation.proto): iid 1, name 2
	fInternFuncNames    = 5  // InternedString (profiling/profile_common.proto): iid 1, str 2
	fInternFrames       = 6  // Frame (profile_common.proto)
	fInternCallstacks   = 7  // Callstack (profile_common.proto)
	fInternMappingPaths = 17 // InternedString
	fInternMappings     = 19 // Mapping (profile_common.proto)
	fInternDebugStrings = 29 // InternedString
	fIID                = 1
	fName               = 2 // EventCategory.name, EventName.name, DebugAnnotationName.name, InternedString.str
	// profiling/profile_common.proto: Frame, Callstack, Mapping
	fFrameFuncID     = 2
	fFrameMappingID  = 3
	fFrameRelPC      = 4
	fCallstackFrames = 2 // frame_ids, root first
	fMappingPathIDs  = 7 // path_string_ids

	// ps/process_tree.proto: ProcessTree, ProcessTree.Process, ProcessTree.Thread
	fTreeProcesses  = 1
	fTreeThreads    = 2
	fTreeProcPID    = 1
	fTreeProcCmd    = 3
	fTreeProcIsComm = 9 // cmdline_is_comm
	fTreeThreadTID  = 1
	fTreeThreadName = 2
	fTreeThreadTGID = 3

	// ftrace/ftrace_event_bundle.proto: FtraceEventBundle
	fBundleCPU   = 1
	fBundleEvent = 2
	// ftrace/ftrace_event.proto: FtraceEvent
	fFtraceTimestamp   = 1
	fFtracePID         = 2
	fFtraceSchedSwitch = 4
	fFtraceSchedWaking = 20
	fFtraceWakeupNew   = 114
	fFtraceNewtask     = 235
	fFtraceProcessExit = 238
	// ftrace/sched.proto: SchedSwitchFtraceEvent
	fSwitchPrevComm  = 1
	fSwitchPrevPID   = 2
	fSwitchPrevPrio  = 3
	fSwitchPrevState = 4
	fSwitchNextComm  = 5
	fSwitchNextPID   = 6
	fSwitchNextPrio  = 7
	// ftrace/sched.proto: SchedWakingFtraceEvent, SchedWakeupNewFtraceEvent
	fWakeComm    = 1
	fWakePID     = 2
	fWakePrio    = 3
	fWakeSuccess = 4
	fWakeTarget  = 5
	// ftrace/task.proto: TaskNewtaskFtraceEvent
	fNewtaskPID   = 1
	fNewtaskComm  = 2
	fNewtaskFlags = 3
	// ftrace/sched.proto: SchedProcessExitFtraceEvent
	fExitComm = 1
	fExitPID  = 2
	fExitTGID = 3
	fExitPrio = 4
)

// sequenceID is the one packet sequence the writer writes.
const sequenceID = 1

// defaultPrio is a CFS thread's priority as sched_switch reports it (nice 0).
const defaultPrio = 120

// bundleEvents is how many ftrace events a CPU's bundle holds before it
// is written.
const bundleEvents = 4096

// Arg is one debug annotation of an event: a string, or a number when
// IsNum is set; the time line's arguments are the same in both formats.
type Arg = traceevent.Arg

// Str is a string argument, Num a numeric one.
var (
	Str = traceevent.Str
	Num = traceevent.Num
)

// Writer writes one Perfetto trace.
type Writer struct {
	w       *bufio.Writer
	started bool // the sequence's first packet is written

	pkt, msg, sub, intern []byte // the packet, and messages being made

	events, cats, annNames, annStrings interner
	tracks                             map[uint64]bool

	// Frames, as in a call tree: each is a function (its name and its
	// module, ids of Name) called from its parent frame; its id is also
	// its call stack's iid. A function is a Perfetto Frame.
	names     []string
	nameIDs   map[string]int32
	nameSent  []bool // the name is interned as a function name
	modSent   map[int32]uint64
	frames    calltree.Tree
	funcIIDs  map[[2]int32]uint64
	stackSent []bool
	path      []uint64

	cpus []cpuBundle
}

type cpuBundle struct {
	buf []byte // encoded FtraceEvents (fields 2 of the bundle)
	n   int
}

// interner gives strings their iids, 1 up, noting which are new.
type interner map[string]uint64

func (in *interner) iid(s string) (uint64, bool) {
	if *in == nil {
		*in = interner{}
	}
	if id, ok := (*in)[s]; ok {
		return id, false
	}
	id := uint64(len(*in) + 1)
	(*in)[s] = id
	return id, true
}

// New starts a trace on out.
func New(out io.Writer) *Writer {
	return &Writer{w: bufio.NewWriterSize(out, 1<<20), tracks: map[uint64]bool{},
		nameIDs: map[string]int32{}, modSent: map[int32]uint64{}, funcIIDs: map[[2]int32]uint64{}}
}

// Track uuids: thread tracks, their child tracks, named tracks.
const (
	kindThread  = 1 << 60
	kindProcess = 2 << 60
	kindNamed   = 3 << 60
)

// ThreadTrack is the uuid of thread (pid, tid)'s track.
func ThreadTrack(pid, tid uint32) uint64 { return kindThread | uint64(pid)<<30 | uint64(tid) }

// NamedTrack is the uuid of a track of the caller's: n is below 2^60.
func NamedTrack(n uint64) uint64 { return kindNamed | n }

// packet starts a packet at time t in w.pkt.
func (w *Writer) packet(t uint64, needsState bool) {
	b := w.pkt[:0]
	if t != 0 {
		b = protowire.AppendTag(b, fPktTimestamp, protowire.VarintType)
		b = protowire.AppendVarint(b, t)
	}
	b = protowire.AppendTag(b, fPktSequenceID, protowire.VarintType)
	b = protowire.AppendVarint(b, sequenceID)
	var flags uint64
	if !w.started {
		w.started = true
		flags = seqIncrementalClear
	}
	if needsState {
		flags |= seqNeedsIncremental
	}
	if flags != 0 {
		b = protowire.AppendTag(b, fPktSequenceFlags, protowire.VarintType)
		b = protowire.AppendVarint(b, flags)
	}
	w.pkt = b
}

// emit writes the packet made as field 1 of the Trace.
func (w *Writer) emit() {
	var hdr [16]byte
	h := protowire.AppendTag(hdr[:0], fTracePacket, protowire.BytesType)
	h = protowire.AppendVarint(h, uint64(len(w.pkt)))
	w.w.Write(h)
	w.w.Write(w.pkt)
}

func appendUint(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendStr(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendMsg(b []byte, num protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

// internStr appends to the interned data an entry {iid, name} of field num.
func (w *Writer) internStr(num protowire.Number, iid uint64, s string) {
	w.intern = protowire.AppendTag(w.intern, num, protowire.BytesType)
	l := protowire.SizeTag(fIID) + protowire.SizeVarint(iid) + protowire.SizeTag(fName) + protowire.SizeBytes(len(s))
	w.intern = protowire.AppendVarint(w.intern, uint64(l))
	w.intern = appendUint(w.intern, fIID, iid)
	w.intern = appendStr(w.intern, fName, s)
}

// descriptor writes a TrackDescriptor packet (the message in w.sub).
func (w *Writer) descriptor(t uint64) {
	w.packet(t, false)
	w.pkt = appendMsg(w.pkt, fPktTrackDescriptor, w.sub)
	w.emit()
}

// Process describes process pid's track, once: its name.
func (w *Writer) Process(pid uint32, name string) {
	uuid := kindProcess | uint64(pid)
	if w.tracks[uuid] {
		return
	}
	w.tracks[uuid] = true
	m := appendUint(w.msg[:0], fProcPID, uint64(pid))
	m = appendStr(m, fProcName, name)
	w.msg = m
	w.sub = appendUint(w.sub[:0], fTrackUUID, uuid)
	w.sub = appendMsg(w.sub, fTrackProcess, w.msg)
	w.descriptor(0)
}

// Thread describes thread (pid, tid)'s track, once, named name (its
// command: Perfetto adds the tid), and returns its uuid.
func (w *Writer) Thread(pid, tid uint32, name string) uint64 {
	uuid := ThreadTrack(pid, tid)
	if w.tracks[uuid] {
		return uuid
	}
	w.tracks[uuid] = true
	m := appendUint(w.msg[:0], fThreadPID, uint64(pid))
	m = appendUint(m, fThreadTID, uint64(tid))
	m = appendStr(m, fThreadName, name)
	w.msg = m
	w.sub = appendUint(w.sub[:0], fTrackUUID, uuid)
	w.sub = appendMsg(w.sub, fTrackThread, w.msg)
	w.descriptor(0)
	return uuid
}

// Track describes the track uuid, once: named name, a child of parent
// (0: top level).
func (w *Writer) Track(uuid, parent uint64, name string) {
	if w.tracks[uuid] {
		return
	}
	w.tracks[uuid] = true
	w.sub = appendUint(w.sub[:0], fTrackUUID, uuid)
	if parent != 0 {
		w.sub = appendUint(w.sub, fTrackParent, parent)
	}
	w.sub = appendStr(w.sub, fTrackName, name)
	w.descriptor(0)
}

// ProcessTree writes at t a ProcessTree packet: with proc, process pid
// named proc (its command); with name, its thread tid named name.
func (w *Writer) ProcessTree(t uint64, pid, tid uint32, proc, name string) {
	w.sub = w.sub[:0]
	if proc != "" {
		m := appendUint(w.msg[:0], fTreeProcPID, uint64(pid))
		m = appendStr(m, fTreeProcCmd, proc)
		m = appendUint(m, fTreeProcIsComm, 1)
		w.msg = m
		w.sub = appendMsg(w.sub, fTreeProcesses, w.msg)
	}
	if name != "" {
		m := appendUint(w.msg[:0], fTreeThreadTID, uint64(tid))
		m = appendStr(m, fTreeThreadName, name)
		m = appendUint(m, fTreeThreadTGID, uint64(pid))
		w.msg = m
		w.sub = appendMsg(w.sub, fTreeThreads, w.msg)
	}
	w.packet(t, false)
	w.pkt = appendMsg(w.pkt, fPktProcessTree, w.sub)
	w.emit()
}

// event writes the TrackEvent of type typ made in w.sub (its other
// fields), with its name and category interned, and its args.
func (w *Writer) event(typ uint64, track, t uint64, cat, name string, stack int, args []Arg) {
	w.intern = w.intern[:0]
	m := w.msg[:0]
	m = appendUint(m, fTrackEventType, typ)
	m = appendUint(m, fTrackEventTrackUUID, track)
	if cat != "" {
		id, isNew := w.cats.iid(cat)
		if isNew {
			w.internStr(fInternCategories, id, cat)
		}
		m = appendUint(m, fTrackEventCatIIDs, id)
	}
	if name != "" {
		id, isNew := w.events.iid(name)
		if isNew {
			w.internStr(fInternEventNames, id, name)
		}
		m = appendUint(m, fTrackEventNameIID, id)
	}
	if stack > 0 {
		w.internStack(int32(stack))
		m = appendUint(m, fTrackEventStackIID, uint64(stack))
	}
	for _, a := range args {
		m = w.appendArg(m, a)
	}
	w.msg = m
	w.packet(t, true)
	if len(w.intern) > 0 {
		w.pkt = appendMsg(w.pkt, fPktInternedData, w.intern)
	}
	w.pkt = appendMsg(w.pkt, fPktTrackEvent, w.msg)
	w.emit()
}

// appendArg appends a DebugAnnotation to the TrackEvent m.
func (w *Writer) appendArg(m []byte, a Arg) []byte {
	id, isNew := w.annNames.iid(a.Key)
	if isNew {
		w.internStr(fInternDebugNames, id, a.Key)
	}
	d := appendUint(w.sub[:0], fDebugNameIID, id)
	if a.IsNum {
		d = appendUint(d, fDebugUint, a.Num)
	} else {
		sid, isNew := w.annStrings.iid(a.Str)
		if isNew {
			w.internStr(fInternDebugStrings, sid, a.Str)
		}
		d = appendUint(d, fDebugStringValueIID, sid)
	}
	w.sub = d
	return appendMsg(m, fTrackEventDebug, d)
}

// Begin opens a slice on track at t; End closes its innermost.
func (w *Writer) Begin(track, t uint64, cat, name string, args ...Arg) {
	w.event(typeSliceBegin, track, t, cat, name, 0, args)
}

// End closes the innermost open slice of track at t; its args are added
// to the slice's.
func (w *Writer) End(track, t uint64, args ...Arg) {
	w.event(typeSliceEnd, track, t, "", "", 0, args)
}

// Instant writes an instant event on track at t with the call stack
// stack (a Frame; 0: none).
func (w *Writer) Instant(track, t uint64, cat, name string, stack int, args ...Arg) {
	w.event(typeInstant, track, t, cat, name, stack, args)
}

// Name is the id of the string s among the names of frames.
func (w *Writer) Name(s string) int32 {
	id, ok := w.nameIDs[s]
	if !ok {
		id = int32(len(w.names))
		w.names = append(w.names, s)
		w.nameSent = append(w.nameSent, false)
		w.nameIDs[s] = id
	}
	return id
}

// FrameOf returns the id (1 up) of the stack frame of the function
// named name (a Name) in the module mod (a Name) called from parent (0:
// a root frame): the call stack whose leaf it is.
func (w *Writer) FrameOf(parent int, name, mod int32) int {
	id := w.frames.Of(int32(parent), name, mod)
	if int(id) > len(w.stackSent) {
		w.stackSent = append(w.stackSent, false)
	}
	return int(id)
}

// internStack adds to the interned data the call stack id, and the
// functions, names and modules it needs that are not yet.
func (w *Writer) internStack(id int32) {
	if w.stackSent[id-1] {
		return
	}
	w.stackSent[id-1] = true
	w.path = w.path[:0]
	for f := id; f > 0; f = w.frames.Frame(f).Parent {
		fr := w.frames.Frame(f)
		w.path = append(w.path, w.funcIID(fr.Name, fr.Mod))
	}
	// Callstack: iid, frame_ids (packed), root first
	var packed []byte
	for i := len(w.path) - 1; i >= 0; i-- {
		packed = protowire.AppendVarint(packed, w.path[i])
	}
	m := appendUint(w.sub[:0], fIID, uint64(id))
	m = appendMsg(m, fCallstackFrames, packed)
	w.sub = m
	w.intern = appendMsg(w.intern, fInternCallstacks, m)
}

// funcIID is the iid of the Perfetto Frame of function name in module
// mod, interning it (and its name and module) when new.
func (w *Writer) funcIID(name, mod int32) uint64 {
	k := [2]int32{name, mod}
	if id, ok := w.funcIIDs[k]; ok {
		return id
	}
	id := uint64(len(w.funcIIDs) + 1)
	w.funcIIDs[k] = id
	if !w.nameSent[name] {
		w.nameSent[name] = true
		w.internStr(fInternFuncNames, uint64(name)+1, w.names[name])
	}
	mapping, ok := w.modSent[mod]
	if !ok {
		// a Mapping per module: its path (the module's name), as a
		// mapping path string
		mapping = uint64(len(w.modSent) + 1)
		w.modSent[mod] = mapping
		w.internStr(fInternMappingPaths, mapping, w.names[mod])
		m := appendUint(nil, fIID, mapping)
		m = appendMsg(m, fMappingPathIDs, protowire.AppendVarint(nil, mapping))
		w.intern = appendMsg(w.intern, fInternMappings, m)
	}
	f := appendUint(nil, fIID, id)
	f = appendUint(f, fFrameFuncID, uint64(name)+1)
	f = appendUint(f, fFrameMappingID, mapping)
	f = appendUint(f, fFrameRelPC, 0)
	w.intern = appendMsg(w.intern, fInternFrames, f)
	return id
}
