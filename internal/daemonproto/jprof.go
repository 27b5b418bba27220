package daemonproto

// OpJProf writes records of the JVMTI agent (bin/libjprof.so) into the
// trace: JIT code loads and unloads, method names, method entry/exit
// (JProfArgs). The process is the caller's (SO_PEERCRED), never an argument.
const OpJProf = "jprof"

// JProfFrameHead is the start of the op's binary frame (FrameMagic): the
// CPU whose buffer takes the records (i32 little-endian), then the records
// as JProfArgs.Stream holds them, raw.
const JProfFrameHead = 4

// JProfMaxRecords bounds one request.
const JProfMaxRecords = 256

// JProfArgs is a batch of records, in the order written: Records, or
// Stream, the agent's binary form (the agent writes no text per record).
type JProfArgs struct {
	Records []JProfRecord `json:"records,omitempty"`
	// Stream holds records in the trace's own binary layouts
	// (libperfutil/trace: JIT_LOAD, JIT_UNLOAD, JIT_METHOD, 0x30 / 0x50
	// entry/exit), a TIME_HIGH record before the first and wherever the
	// time's high half changes, as trace.Reader reads a segment. The pid
	// field of each is replaced by the caller's. At most MaxRequest bytes.
	Stream []byte `json:"stream,omitempty"`
	// CPU is the CPU whose buffer takes Stream's records.
	CPU int `json:"cpu,omitempty"`
}

// JProfRecord is one record: Major trace.MajorJITLoad with Minor JITLoad
// (TID, Addr, Size, Name), JITUnload (Addr, Size) or JITMethod (ID, Name);
// or Major 0x30 / 0x50 (method entry / exit: TID, ID).
type JProfRecord struct {
	CPU   int    `json:"cpu"`
	Time  uint64 `json:"time"`
	Major uint16 `json:"major"`
	Minor uint32 `json:"minor"`
	TID   uint32 `json:"tid,omitempty"`
	Addr  uint64 `json:"addr,omitempty"`
	Size  uint64 `json:"size,omitempty"`
	ID    uint64 `json:"id,omitempty"`
	Name  string `json:"name,omitempty"`
}

// JProfReply says how many records were written (the others were of a
// disabled record type).
type JProfReply struct {
	Written int `json:"written"`
}
