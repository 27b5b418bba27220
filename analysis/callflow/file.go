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
	RecSize    = 16
	HeaderRecs = 2
	Magic      = 0x3154494b4f4f48
	Version    = 3
	KindShift  = 56
	HookShift  = 32 // d: interval (32 bits) | hook << 32 (16 bits) | spd << 48 (signed 16, 8-byte units)
	SPDShift   = 48
	EndMark    = ^uint64(0) // both words of the final sync's second record
	TailMagic  = 0x4c494154544b48
	APIShift   = 55 // the event came through hookit_enter/exit
	TypeShift  = 48 // the method type (hookit_api.h), 3 bits
	TypeMask   = 7
	FnMask     = 1<<TypeShift - 1
	NumTypes   = 8
)

// Kinds of records.
const (
	KindEnter   = 1
	KindExit    = 2
	KindAdjust  = 3
	KindMark    = 4
	KindExcExit = 5 // exception exit (hookit_exception_exit)
	KindSync    = 6 // absolute values (two records)
	KindDSIN    = 7 // dispatches | interrupts << 32 in the interval the next event ends (kmod)
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
	Type   uint8 // method type, 0..7 (hookit_api.h)
	API    bool  // recorded by hookit_enter/exit, not by the -finstrument-functions hooks
}

// Thread is the events of one thread.
type Thread struct {
	PID, TID int
	Events   []Event
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

	TInner, TOuter       float64 // minimum of 100 batch averages of 100 empty pairs
	TInnerMed, TOuterMed float64 // the median of those averages (the spread's other end)
	// The same for the in-process API's path (hookit_enter / hookit_exit).
	TInnerAPI, TOuterAPI       float64
	TInnerAPIMed, TOuterAPIMed float64
}

// Process is what one process of the run left in the directory.
type Process struct {
	Info    Info
	Maps    []byte
	Threads []*Thread
	// Names given with hookit_name (hookit-PID.names): looked up before
	// the addresses are resolved with A2N.
	Names map[uint64]string
}

var threadFile = regexp.MustCompile(`^hookit-(\d+)-(\d+)\.bin$`)

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
			t, err := ReadThread(filepath.Join(dir, name))
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
		sort.Slice(p.Threads, func(i, j int) bool { return p.Threads[i].TID < p.Threads[j].TID })
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Info.PID < out[j].Info.PID })
	return out, nil
}

// ReadThread reads one thread file, with its tail file (the buffer of a
// process that was killed, or is still running) when there is one.
func ReadThread(path string) (*Thread, error) {
	b, err := readRegular(path)
	if err != nil {
		return nil, fmt.Errorf("reading a thread file: %w", err)
	}
	if tail, err := readRegular(strings.TrimSuffix(path, ".bin") + ".tail"); err == nil {
		b = AppendTail(b, tail)
	}
	t, err := ParseThread(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t.Path = path
	return t, nil
}

// AppendTail returns the thread file's records followed by those of its
// tail file (the buffer: {TailMagic, the thread file's size when it was
// last cleared}, then records up to the first zero tag). A tail whose
// size is below the thread file's was written already (the process was
// killed between the write and the clearing): the file is returned as is.
func AppendTail(bin, tail []byte) []byte {
	le := binary.LittleEndian
	if len(tail) < RecSize || le.Uint64(tail) != TailMagic {
		return bin
	}
	// Written already (the file is longer), or a file cut short before
	// the tail's start (shorter): nothing to join.
	if off := le.Uint64(tail[8:]); off != uint64(len(bin)) {
		return bin
	}
	out := append([]byte(nil), bin...)
	for i := RecSize; i+RecSize <= len(tail); i += RecSize {
		if le.Uint64(tail[i:]) == 0 {
			break
		}
		out = append(out, tail[i:i+RecSize]...)
	}
	return out
}

// ParseThread decodes a thread file's bytes: 16-byte records, each event
// delta-coded against the one before, with syncs where a value did not
// fit (libperfutil/c/hookit/hookit.h).
func ParseThread(b []byte) (*Thread, error) {
	if len(b) < HeaderRecs*RecSize {
		return nil, fmt.Errorf("too short for a hookit thread file (%d bytes)", len(b))
	}
	le := binary.LittleEndian
	if le.Uint64(b) != Magic {
		return nil, fmt.Errorf("not a hookit thread file (bad magic)")
	}
	if v := le.Uint64(b[RecSize:]); v != Version {
		return nil, fmt.Errorf("hookit thread file version %d, this reader knows %d", v, Version)
	}
	ids := le.Uint64(b[8:])
	t := &Thread{PID: int(ids >> 32), TID: int(uint32(ids))}
	n := len(b) / RecSize
	t.Events = make([]Event, 0, n-HeaderRecs)
	var (
		lastEarly, lastLate, sp uint64
		synced, ended           bool
		pendDS, pendIN          uint32
		syncEarly, syncSP       uint64
		based                   bool // a sync gave the absolute values
	)
	setLate := func(late uint64) {
		if k := len(t.Events); k > 0 {
			t.Events[k-1].Late = late
		}
		lastLate = late
	}
	for i := HeaderRecs; i < n; i++ {
		r := b[i*RecSize:]
		tag, d := le.Uint64(r), le.Uint64(r[8:])
		if tag == 0 {
			t.Partial = true
			break
		}
		if ended {
			return nil, fmt.Errorf("record %d: a record after the end", i)
		}
		k := uint8(tag >> KindShift)
		if k == KindSync {
			if i+1 >= n {
				t.Partial = true
				break
			}
			s1 := b[(i+1)*RecSize:]
			setLate(d)
			syncEarly, syncSP = le.Uint64(s1), le.Uint64(s1[8:])
			if syncEarly == EndMark && syncSP == EndMark {
				ended = true // the end of the thread's records
			}
			synced, based = true, true
			i++
			continue
		}
		if k == KindDSIN {
			pendDS += uint32(d)
			pendIN += uint32(d >> 32)
			continue
		}
		if k < KindEnter || k > KindExcExit {
			return nil, fmt.Errorf("record %d: unknown kind %d", i, k)
		}
		if !based {
			return nil, fmt.Errorf("record %d: an event before the first sync", i)
		}
		e := Event{Kind: k, Type: uint8(tag>>TypeShift) & TypeMask, API: tag>>APIShift&1 == 1, Fn: tag & FnMask, DS: pendDS, IN: pendIN}
		pendDS, pendIN = 0, 0
		if synced {
			e.Early = syncEarly
			if syncSP != 0 {
				sp = syncSP
			}
			synced = false
		} else {
			setLate(lastEarly + (d >> HookShift & 0xffff))
			e.Early = lastLate + (d & 0xffffffff)
			if !e.API && k != KindMark {
				sp += uint64(int64(int16(d>>SPDShift)) * 8)
			}
		}
		switch {
		case k == KindMark:
			// The marker's id: what, and the reset count above it.
			e.Fn, e.SP = e.Fn&0xff, e.Fn>>8
		case !e.API:
			e.SP = sp
		}
		e.Late = e.Early // until the next record says
		lastEarly = e.Early
		t.Events = append(t.Events, e)
	}
	if len(b)%RecSize != 0 || !ended {
		t.Partial = true
	}
	return t, nil
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
		case "exe":
			in.Exe = v
		case "metric":
			in.Metric = v
		case "backend":
			in.Backend = v
		case "dsin":
			in.DSIN = v
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
