// Package callflow reads what libhookit (libperfutil/c/hookit) wrote — one
// file per thread of entry/exit events with early and late metric reads —
// builds the calibrated call tree of each thread, and writes the reports:
// log-rt, log-gen, pprof, folded stacks and a Chrome/Perfetto trace.
package callflow

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"perfinsp/internal/untrusted"
)

// The thread file's layout (libperfutil/c/hookit/hookit.h; checked by
// the cgo test of internal/hookabi).
const (
	RecSize    = 16 // a record of two words (the header's too)
	WordSize   = 8  // a short event is one word
	HeaderRecs = 2
	Magic      = 0x3154494b4f4f48
	Version    = 6
	// VersionNoInl is the format before the inlined mark (InlShift),
	// VersionLong the one before short events (two-word records only),
	// and VersionNoWall the one before the wall-clock anchors (KindWall);
	// all still read.
	VersionNoInl  = 5
	VersionLong   = 4
	VersionNoWall = 3
	KindShift     = 56
	HookShift     = 32 // d: interval (32 bits) | hook << 32 (16 bits) | spd << 48 (signed 16, 8-byte units)
	SPDShift      = 48
	EndMark       = ^uint64(0) // both words of the final sync's second record
	TailMagic     = 0x4c494154544b48
	APIShift      = 55 // the event came through hookit_enter/exit
	InlShift      = 54 // a hook's entry into a function inlined into the previous entry's (Event.Inlined)
	TypeShift     = 48 // the method type (hookit_api.h), 3 bits
	TypeMask      = 7
	FnMask        = 1<<TypeShift - 1
	NumTypes      = 8
	// A short event: Short << ShortShift | exit << ShortExitShift | api
	// << ShortAPIShift | slot << SlotShift | spd << ShortSPDShift |
	// interval (with api, the type in spd's place); its id is the one the
	// thread's last two-word entry or exit event with that slot (Slot)
	// named.
	Short          = 3
	ShortShift     = 62
	ShortExitShift = 61
	ShortAPIShift  = 60
	ShortInlShift  = 59
	SlotShift      = 48
	ShortSPDShift  = 32
	Slots          = 1024
)

// Slot is the slot of a function in the table that short events name it
// by (HK_SLOT).
func Slot(fn uint64) int { return int((fn>>4)^(fn>>14)) & (Slots - 1) }

// Kinds of records.
const (
	KindEnter   = 1
	KindExit    = 2
	KindAdjust  = 3
	KindMark    = 4
	KindExcExit = 5  // exception exit (hookit_exception_exit)
	KindSync    = 6  // absolute values (two records)
	KindDSIN    = 7  // dispatches | interrupts << 32 in the interval the next event ends (kmod)
	KindWall    = 8  // the wall clock (CLOCK_MONOTONIC ns) at the next event's early read
	KindSys     = 9  // system calls (the tag's low 32 bits) and their metric in the interval the next event ends
	KindFlt     = 10 // user page faults (the tag's low 32 bits) and their metric, likewise
)

// Markers (the function field of a KindMark record).
const (
	MarkExit  = 1
	MarkReset = 2
	MarkStart = 3
	MarkEnd   = 4
)

// Event is one record of a thread file.
type Event struct {
	Kind  uint8
	Fn    uint64 // function address or the API's id (the marker for KindMark)
	SP    uint64 // stack pointer of the event (the reset count for KindMark)
	Early uint64 // metric read at the hook's start
	Late  uint64 // metric read at the hook's end
	// Dispatches and interrupts of the thread in the interval this event
	// ends (kmod backend only).
	DS, IN uint32
	// SysN, Sys: the thread's system calls in the interval this event
	// ends and the metric they took (Info.Sys "in" or "out"; 0 elsewhere).
	SysN uint32
	Sys  uint64
	// FltN, Flt: likewise its user page faults (Info.Faults "in" or
	// "out"; 0 elsewhere).
	FltN uint32
	Flt  uint64
	// Wall: the wall clock (CLOCK_MONOTONIC ns) at Early, where an anchor
	// record dated it (0 elsewhere).
	Wall uint64
	Type uint8 // method type, 0..7 (hookit_api.h)
	API  bool  // recorded by hookit_enter/exit, not by the -finstrument-functions hooks
	// Inlined: an entry of a function the compiler inlined into the
	// function of the thread's previous entry, at that frame's stack
	// pointer: it does not close the frame (stack repair).
	Inlined bool
}

// Thread is the events of one thread.
type Thread struct {
	PID, TID int
	// Life: 1, or N for the Nth thread of an OS thread whose earlier
	// threads ended (a JVM's DestroyJavaVM after main, a JNI detach and
	// attach): file hookit-PID-TID.N.bin.
	Life   int
	Events []Event
	// Partial: the file ended in unwritten (zero) records: the process
	// was killed, or is still running.
	Partial bool
	Path    string
}

// Info is the process file hookit-PID.info: the metric and the
// calibration measured at start-up.
type Info struct {
	PID     int
	Exe     string
	Metric  string
	Backend string
	DSIN    string // "kmod": the events carry dispatches and interrupts; "none"
	// Sys: whether the events carry the thread's system calls and whether
	// the metric holds them: "in" (metric tsc: the intervals hold the
	// system calls' kernel time, which Sys says), "out" (tsc-user: they
	// do not), "none" or "" (not measured).
	Sys string
	// SysGlue: the kernel's code per system call outside the module's
	// window, measured at start-up and counted in each event's Sys.
	SysGlue float64
	// Faults: whether the metric holds the thread's user page faults:
	// "in" (tsc), "out" (tsc-user: the module's fault windows and
	// FaultGlue per fault taken off), "none" or "" (not measured).
	Faults string
	// FaultGlue: the kernel's exception entry and exit code per user page
	// fault outside the module's window, measured at start-up.
	FaultGlue float64
	// Resumes: whether the module measures the rseq update the kernel
	// makes on a thread's way back to user mode after a switch (after a
	// blocking system call, the rest of its way out): "in" or "out" as
	// Sys, whose figures (Event.Sys) hold them; "none" or "" (not
	// measured: such updates are in the metric). ResumeGlue: the kernel's
	// code per update outside the module's window, measured at start-up.
	Resumes    string
	ResumeGlue float64
	// Dropped: events the runtime did not record (dropped=N, appended at
	// the end): signal handlers run while the runtime itself was
	// interrupted (inside a hook, or a thread's files opening), and one
	// for each thread whose file could not be opened or written.
	Dropped uint64

	TInner, TOuter       float64 // minimum of 100 batch averages of 100 empty pairs
	TInnerMed, TOuterMed float64 // the median of those averages (the spread's other end)
	// The same for the in-process API's path (hookit_enter / hookit_exit).
	TInnerAPI, TOuterAPI       float64
	TInnerAPIMed, TOuterAPIMed float64
	// Reads: metric reads per hook, 2 (early and late: the hook's own
	// work charged to no one) or 1 (its work is in the intervals, which
	// the calibration takes off).
	Reads int
	// NsPerUnit is the metric's nanoseconds per unit (1 for task-clock,
	// the TSC's rate for rdtsc); 0 where the metric is no time.
	NsPerUnit float64
	// TPlain, TPlainAPI: the calibration loop uninstrumented, per call:
	// the caller's own work, already taken out of TOuter / TOuterAPI.
	TPlain, TPlainAPI float64
}

// HasSys: the events carry the thread's system calls (SYS in the reports).
func (in Info) HasSys() bool { return in.Sys == "in" || in.Sys == "out" }

// ResumeNote: what SYS holds besides the system calls, for the reports'
// headers ("" where the module does not measure resumes).
func (in Info) ResumeNote() string {
	if in.Resumes != "in" && in.Resumes != "out" {
		return ""
	}
	return fmt.Sprintf("; with the rseq update on the way back to user mode after a switch, %.0f per update of exit code included", in.ResumeGlue)
}

// HasFaults: the events carry the thread's user page faults (FLT in the
// reports).
func (in Info) HasFaults() bool { return in.Faults == "in" || in.Faults == "out" }

// Process is what one process of the run left in the directory.
type Process struct {
	Info    Info
	Maps    []byte
	Threads []*Thread
	// Names given with hookit_name (hookit-PID.names): looked up before
	// the addresses are resolved with A2N.
	Names map[uint64]string
	// ThreadNames: each thread's name (comm), from hookit-PID.threads.
	ThreadNames map[int]string
}

// ParseThreadNames decodes the "TID NAME" lines of a threads file (a later
// line for a thread wins).
func ParseThreadNames(b []byte) map[int]string {
	m := map[int]string{}
	for _, l := range strings.Split(string(b), "\n") {
		h, name, ok := strings.Cut(l, " ")
		tid, err := strconv.Atoi(h)
		if !ok || err != nil || name == "" {
			continue
		}
		m[tid] = name
	}
	return m
}

var threadFile = regexp.MustCompile(`^hookit-(\d+)-(\d+)(?:\.(\d+))?\.bin$`)

// fileLife is Thread.Life from a thread file's name.
func fileLife(path string) int {
	if m := threadFile.FindStringSubmatch(filepath.Base(path)); m != nil && m[3] != "" {
		if n, err := strconv.Atoi(m[3]); err == nil && n > 1 {
			return n
		}
	}
	return 1
}

// Load reads every process and thread file in dir.
func Load(dir string) ([]*Process, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the hookit directory: %w", err)
	}
	procs := map[int]*Process{}
	get := func(pid int) *Process {
		p := procs[pid]
		if p == nil {
			p = &Process{Info: Info{PID: pid}}
			procs[pid] = p
		}
		return p
	}
	for _, e := range ents {
		name := e.Name()
		if m := threadFile.FindStringSubmatch(name); m != nil {
			pid, _ := strconv.Atoi(m[1])
			t, err := openThread(filepath.Join(dir, name))
			if err != nil {
				return nil, err
			}
			p := get(pid)
			p.Threads = append(p.Threads, t)
			continue
		}
		var pid int
		if n, _ := fmt.Sscanf(name, "hookit-%d.info", &pid); n == 1 && strings.HasSuffix(name, ".info") {
			info, err := ReadInfo(filepath.Join(dir, name))
			if err != nil {
				return nil, err
			}
			get(pid).Info = info
		} else if n, _ := fmt.Sscanf(name, "hookit-%d.names", &pid); n == 1 && strings.HasSuffix(name, ".names") {
			names, err := ReadNames(filepath.Join(dir, name))
			if err != nil {
				return nil, err
			}
			get(pid).Names = names
		} else if n, _ := fmt.Sscanf(name, "hookit-%d.threads", &pid); n == 1 && strings.HasSuffix(name, ".threads") {
			b, err := readRegular(filepath.Join(dir, name))
			if err != nil {
				return nil, fmt.Errorf("reading the thread names: %w", err)
			}
			get(pid).ThreadNames = ParseThreadNames(b)
		} else if n, _ := fmt.Sscanf(name, "hookit-%d.maps", &pid); n == 1 && strings.HasSuffix(name, ".maps") {
			b, err := readRegular(filepath.Join(dir, name))
			if err != nil {
				return nil, fmt.Errorf("reading the memory map: %w", err)
			}
			get(pid).Maps = b
		}
	}
	if len(procs) == 0 {
		return nil, fmt.Errorf("no hookit files in %s: was the program built with -finstrument-functions and run under scripts/run.hookit (LD_PRELOAD=bin/libhookit.so)?", dir)
	}
	var out []*Process
	for _, p := range procs {
		sort.Slice(p.Threads, func(i, j int) bool {
			a, b := p.Threads[i], p.Threads[j]
			if a.TID != b.TID {
				return a.TID < b.TID
			}
			return a.Life < b.Life
		})
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Info.PID < out[j].Info.PID })
	return out, nil
}

// ReadThread reads one thread file, with its tail file (the buffer of a
// process that was killed, or is still running) when there is one, into
// memory (Events). The reports stream the file instead (Thread.Each).
func ReadThread(path string) (*Thread, error) {
	t := &Thread{Path: path, Life: fileLife(path)}
	var evs []Event
	if err := t.stream(func(e *Event) { evs = append(evs, *e) }); err != nil {
		return nil, err
	}
	t.Events = evs
	if t.Events == nil {
		t.Events = []Event{}
	}
	return t, nil
}

// openThread checks a thread file's header and returns the thread (its
// ids and path; no events: Each streams them).
func openThread(path string) (*Thread, error) {
	f, _, err := untrusted.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading a thread file: %w", err)
	}
	defer f.Close()
	var h [HeaderRecs * RecSize]byte
	n, err := io.ReadFull(f, h[:])
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return nil, fmt.Errorf("reading a thread file: %w", err)
	}
	pid, tid, err := parseHeader(h[:n])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &Thread{PID: pid, TID: tid, Life: fileLife(path), Path: path}, nil
}

func parseHeader(b []byte) (pid, tid int, err error) {
	if len(b) < HeaderRecs*RecSize {
		return 0, 0, fmt.Errorf("too short for a hookit thread file (%d bytes)", len(b))
	}
	le := binary.LittleEndian
	if le.Uint64(b) != Magic {
		return 0, 0, fmt.Errorf("not a hookit thread file (bad magic)")
	}
	if v := le.Uint64(b[RecSize:]); v < VersionNoWall || v > Version {
		return 0, 0, fmt.Errorf("hookit thread file version %d, this reader knows %d to %d", v, VersionNoWall, Version)
	}
	ids := le.Uint64(b[8:])
	return int(ids >> 32), int(uint32(ids)), nil
}

// Each calls f for every event of the thread in order (the Event is
// reused: copy it to keep it): from Events when they are in memory, else
// streamed from the thread file and its tail file, in memory bounded by
// a buffer whatever the file's size. It sets Partial.
func (t *Thread) Each(f func(e *Event)) error {
	if t.Events != nil || t.Path == "" {
		for i := range t.Events {
			e := t.Events[i]
			f(&e)
		}
		return nil
	}
	return t.stream(f)
}

// stream decodes the thread file at t.Path and its tail file.
func (t *Thread) stream(f func(e *Event)) error {
	file, fi, err := untrusted.Open(t.Path)
	if err != nil {
		return fmt.Errorf("reading a thread file: %w", err)
	}
	defer file.Close()
	size := fi.Size()
	var r io.Reader = io.LimitReader(file, size)
	if tail, err := readRegular(strings.TrimSuffix(t.Path, ".bin") + ".tail"); err == nil {
		if recs := tailRecords(uint64(size), tail); len(recs) > 0 {
			r = io.MultiReader(r, bytes.NewReader(recs))
		}
	}
	d := newDecoder(t)
	if err := d.run(r, f); err != nil {
		return fmt.Errorf("%s: %w", t.Path, err)
	}
	return nil
}

// AppendTail returns the thread file's records followed by those of its
// tail file (the buffer: {TailMagic, the thread file's size when it was
// last cleared}, then records up to the first zero tag). A tail whose
// size is below the thread file's was written already (the process was
// killed between the write and the clearing): the file is returned as is.
func AppendTail(bin, tail []byte) []byte {
	recs := tailRecords(uint64(len(bin)), tail)
	if len(recs) == 0 {
		return bin
	}
	return append(append([]byte(nil), bin...), recs...)
}

// tailRecords is the records of a tail file that follow a thread file of
// size binSize (none when the tail was written already or the file was
// cut short before it): those before the first whose first word is zero.
func tailRecords(binSize uint64, tail []byte) []byte {
	le := binary.LittleEndian
	if len(tail) < RecSize || le.Uint64(tail) != TailMagic || le.Uint64(tail[8:]) != binSize {
		return nil
	}
	end := RecSize
	for end+WordSize <= len(tail) {
		w := le.Uint64(tail[end:])
		n := recWords(w) * WordSize
		if w == 0 || end+n > len(tail) {
			break
		}
		end += n
	}
	return tail[RecSize:end]
}

// recWords is the length in words of the record whose first word is w.
func recWords(w uint64) int {
	switch {
	case w>>ShortShift == Short:
		return 1
	case uint8(w>>KindShift) == KindSync:
		return 4
	}
	return 2
}

// ParseThread decodes a thread file's bytes: records of one or two
// words, each event delta-coded against the one before, with syncs where
// a value did not fit (libperfutil/c/hookit/hookit.h).
func ParseThread(b []byte) (*Thread, error) {
	t := &Thread{}
	evs := []Event{}
	if err := newDecoder(t).run(bytes.NewReader(b), func(e *Event) { evs = append(evs, *e) }); err != nil {
		return nil, err
	}
	t.Events = evs
	return t, nil
}

// decoder turns a thread file's records into events. An event's late read
// is known only from the record after it: each event is handed on when
// the next one (or the end) is decoded.
type decoder struct {
	t                       *Thread
	rec                     int // records decoded
	lastEarly, lastLate, sp uint64
	synced, ended, based    bool
	pendDS, pendIN          uint32
	pendWall                uint64
	pendSysN, pendFltN      uint32
	pendSys, pendFlt        uint64
	syncEarly, syncSP       uint64
	cur                     Event
	have                    bool // cur is an event not yet handed on
	// fns is the function of each slot, as the hooks' table had it:
	// short events name their function by its slot.
	fns [Slots]uint64
}

func newDecoder(t *Thread) *decoder { return &decoder{t: t} }

func (d *decoder) setLate(late uint64) {
	if d.have {
		d.cur.Late = late
	}
	d.lastLate = late
}

// run reads the records of r (header first) and calls f for each event.
func (d *decoder) run(r io.Reader, f func(e *Event)) error {
	buf := make([]byte, 4096*RecSize)
	n, err := io.ReadFull(r, buf[:HeaderRecs*RecSize])
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return err
	}
	pid, tid, err := parseHeader(buf[:n])
	if err != nil {
		return err
	}
	d.t.PID, d.t.TID = pid, tid
	d.rec = HeaderRecs
	var carry int // bytes of a record cut by the buffer's end
	partial := false
	for !partial {
		n, err := io.ReadFull(r, buf[carry:])
		n += carry
		if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
			return err
		}
		whole := n - n%WordSize
		used, stop, perr := d.records(buf[:whole], f)
		if perr != nil {
			return perr
		}
		if stop {
			partial = true
			break
		}
		if err != nil { // the end of the data
			if n%WordSize != 0 || used < whole/WordSize {
				partial = true // a record cut short
			}
			break
		}
		carry = copy(buf, buf[used*WordSize:n])
	}
	if d.have {
		f(&d.cur)
		d.have = false
	}
	d.t.Partial = partial || !d.ended
	return nil
}

// records decodes the whole records of b and returns how many words it
// used (all but a record cut by b's end, which comes whole with the next
// read); stop: a zero first word (unwritten records).
func (d *decoder) records(b []byte, f func(e *Event)) (used int, stop bool, err error) {
	le := binary.LittleEndian
	n := len(b) / WordSize
	for i := 0; i < n; {
		tag := le.Uint64(b[i*WordSize:])
		if tag == 0 {
			return i, true, nil
		}
		size := recWords(tag)
		if i+size > n {
			return i, false, nil
		}
		rec := d.rec
		if d.ended {
			return i, false, fmt.Errorf("record %d: a record after the end", rec)
		}
		var dv uint64
		if size > 1 {
			dv = le.Uint64(b[(i+1)*WordSize:])
		}
		r := b[i*WordSize:]
		i += size
		d.rec++
		if size == 1 {
			var err error
			if tag, dv, err = d.short(tag); err != nil {
				return i - size, false, fmt.Errorf("record %d: %w", rec, err)
			}
		}
		k := uint8(tag >> KindShift)
		switch k {
		case KindSync:
			d.sync(dv, le.Uint64(r[16:]), le.Uint64(r[24:]))
			d.rec++
			continue
		case KindDSIN:
			d.pendDS += uint32(dv)
			d.pendIN += uint32(dv >> 32)
			continue
		case KindWall:
			d.pendWall = dv
			continue
		case KindSys:
			d.pendSysN += uint32(tag)
			d.pendSys += dv
			continue
		case KindFlt:
			d.pendFltN += uint32(tag)
			d.pendFlt += dv
			continue
		}
		if k < KindEnter || k > KindExcExit {
			return i - size, false, fmt.Errorf("record %d: unknown kind %d", rec, k)
		}
		if !d.based {
			return i - size, false, fmt.Errorf("record %d: an event before the first sync", rec)
		}
		d.event(k, tag, dv, f)
	}
	return n, false, nil
}

// short turns a short event into the tag and d of its two-word form.
func (d *decoder) short(w uint64) (tag, dv uint64, err error) {
	api := w >> ShortAPIShift & 1
	inl := w >> ShortInlShift & 1
	if w>>(SlotShift+10)&1 != 0 || api == 1 && (inl != 0 || w>>(ShortSPDShift+3)&(1<<13-1) != 0) {
		return 0, 0, fmt.Errorf("a short event with unknown bits set (%#x)", w)
	}
	fn := d.fns[w>>SlotShift&(Slots-1)]
	if fn == 0 {
		return 0, 0, fmt.Errorf("a short event names slot %d, which no event filled", w>>SlotShift&(Slots-1))
	}
	k := uint64(KindEnter)
	if w>>ShortExitShift&1 == 1 {
		k = KindExit
	}
	if api == 1 {
		return k<<KindShift | 1<<APIShift | (w>>ShortSPDShift&TypeMask)<<TypeShift | fn, w & 0xffffffff, nil
	}
	return k<<KindShift | inl<<InlShift | fn, w&0xffffffff | (w>>ShortSPDShift&0xffff)<<SPDShift, nil
}

// event decodes an event record (its tag and d) and hands on the one
// before it, whose late read it gives.
func (d *decoder) event(k uint8, tag, dv uint64, f func(e *Event)) {
	e := Event{Kind: k, Type: uint8(tag>>TypeShift) & TypeMask, API: tag>>APIShift&1 == 1, Fn: tag & FnMask,
		Inlined: k == KindEnter && tag>>InlShift&1 == 1,
		DS:      d.pendDS, IN: d.pendIN, Wall: d.pendWall, SysN: d.pendSysN, Sys: d.pendSys, FltN: d.pendFltN, Flt: d.pendFlt}
	d.pendDS, d.pendIN, d.pendWall, d.pendSysN, d.pendSys, d.pendFltN, d.pendFlt = 0, 0, 0, 0, 0, 0, 0
	if k == KindEnter || k == KindExit {
		d.fns[Slot(e.Fn)] = e.Fn
	}
	if d.synced {
		e.Early = d.syncEarly
		if d.syncSP != 0 {
			d.sp = d.syncSP
		}
		d.synced = false
	} else {
		d.setLate(d.lastEarly + (dv >> HookShift & 0xffff))
		e.Early = d.lastLate + (dv & 0xffffffff)
		if !e.API && k != KindMark {
			d.sp += uint64(int64(int16(dv>>SPDShift)) * 8)
		}
	}
	switch {
	case k == KindMark:
		// The marker's id: what, and the reset count above it.
		e.Fn, e.SP = e.Fn&0xff, e.Fn>>8
	case !e.API:
		e.SP = d.sp
	}
	e.Late = e.Early // until the next record says
	d.lastEarly = e.Early
	if d.have {
		f(&d.cur)
	}
	d.cur, d.have = e, true
}

func (d *decoder) sync(late, early, sp uint64) {
	d.setLate(late)
	d.syncEarly, d.syncSP = early, sp
	if early == EndMark && sp == EndMark {
		d.ended = true // the end of the thread's records
	}
	d.synced, d.based = true, true
}

// ReadInfo reads hookit-PID.info.
func ReadInfo(path string) (Info, error) {
	b, err := readRegular(path)
	if err != nil {
		return Info{}, fmt.Errorf("reading the process info: %w", err)
	}
	return ParseInfo(b)
}

// ParseInfo decodes the key=value lines of an info file.
func ParseInfo(b []byte) (Info, error) {
	var in Info
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		f := func() float64 { x, _ := strconv.ParseFloat(v, 64); return x }
		switch k {
		case "pid":
			in.PID, _ = strconv.Atoi(v)
		case "dropped":
			in.Dropped, _ = strconv.ParseUint(v, 10, 64)
		case "exe":
			in.Exe = v
		case "metric":
			in.Metric = v
		case "backend":
			in.Backend = v
		case "dsin":
			in.DSIN = v
		case "sys":
			in.Sys = v
		case "sys_glue":
			in.SysGlue = f()
		case "faults":
			in.Faults = v
		case "fault_glue":
			in.FaultGlue = f()
		case "resumes":
			in.Resumes = v
		case "resume_glue":
			in.ResumeGlue = f()
		case "t_inner":
			in.TInner = f()
		case "t_outer":
			in.TOuter = f()
		case "t_inner_median":
			in.TInnerMed = f()
		case "t_outer_median":
			in.TOuterMed = f()
		case "t_inner_api":
			in.TInnerAPI = f()
		case "t_outer_api":
			in.TOuterAPI = f()
		case "t_inner_api_median":
			in.TInnerAPIMed = f()
		case "t_outer_api_median":
			in.TOuterAPIMed = f()
		case "reads":
			in.Reads, _ = strconv.Atoi(v)
		case "ns_per_unit":
			in.NsPerUnit = f()
		case "t_plain":
			in.TPlain = f()
		case "t_plain_api":
			in.TPlainAPI = f()
		}
	}
	if in.Metric == "" {
		return in, fmt.Errorf("info file has no metric line")
	}
	return in, nil
}

// ReadNames reads hookit-PID.names.
func ReadNames(path string) (map[uint64]string, error) {
	b, err := readRegular(path)
	if err != nil {
		return nil, fmt.Errorf("reading the names file: %w", err)
	}
	return ParseNames(b), nil
}

// ParseNames decodes the lines "HEXID NAME" of a names file (written by
// hookit_name); a malformed line is skipped, a later name for an id wins.
func ParseNames(b []byte) map[uint64]string {
	m := map[uint64]string{}
	for _, l := range strings.Split(string(b), "\n") {
		h, name, ok := strings.Cut(l, " ")
		if !ok || name == "" {
			continue
		}
		id, err := strconv.ParseUint(h, 16, 64)
		if err != nil {
			continue
		}
		m[id] = name
	}
	return m
}

// readRegular reads a file of a hookit directory, which may be a
// directory others can write: it is opened without blocking and read
// only if it is a regular file (a FIFO planted under a thread file's name
// must not hang the report), up to the size fstat gives.
func readRegular(path string) ([]byte, error) {
	f, fi, err := untrusted.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, fi.Size())
	n, err := io.ReadFull(f, b)
	if err != nil && err != io.ErrUnexpectedEOF {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b[:n], nil
}
