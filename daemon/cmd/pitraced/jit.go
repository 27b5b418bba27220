package main

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"

	"perfinsp/daemon/facility"
	"perfinsp/daemon/server"
	"perfinsp/format/trace"
	"perfinsp/internal/daemonproto"
)

// registerJProf serves the JVMTI agent's records (docs/jprof.md): JIT code
// loads/unloads and method names for tprof's names, method entry/exit for
// merged trees. Every record is the caller's process: the pid is taken from
// the connection's credentials. Only the user holding the trace (or root)
// may add records to it.
func registerJProf(s *server.Server, logf func(string, ...any)) {
	s.Handle(daemonproto.OpJProf, func(p server.Peer, args json.RawMessage) (any, error) {
		if s.Fac == nil {
			return nil, fmt.Errorf("%s: this agent holds no trace facility", daemonproto.OpJProf)
		}
		w := facility.Writer{UID: p.UID, Root: p.Root()}
		if err := s.Fac.MayWrite(w); err != nil {
			return nil, fmt.Errorf("%s: %w", daemonproto.OpJProf, err)
		}
		if cpu, stream, ok, err := streamArgs(args); ok {
			if err != nil {
				return nil, fmt.Errorf("bad %s arguments: %w", daemonproto.OpJProf, err)
			}
			return jprofStream(s, w, uint64(p.PID), cpu, stream)
		}
		var a daemonproto.JProfArgs
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, fmt.Errorf("bad %s arguments: %w", daemonproto.OpJProf, err)
		}
		if len(a.Records) > daemonproto.JProfMaxRecords {
			return nil, fmt.Errorf("%s: %d records, at most %d per request", daemonproto.OpJProf, len(a.Records), daemonproto.JProfMaxRecords)
		}
		pid := uint64(p.PID)
		var rep daemonproto.JProfReply
		if len(a.Stream) > 0 {
			return jprofStream(s, w, pid, a.CPU, a.Stream)
		}
		for i, r := range a.Records {
			var fields []uint64
			str := ""
			switch {
			case r.Major == trace.MajorJITLoad && r.Minor == trace.JITLoad:
				fields, str = []uint64{pid, uint64(r.TID), r.Addr, r.Size}, r.Name
			case r.Major == trace.MajorJITLoad && r.Minor == trace.JITUnload:
				fields = []uint64{pid, r.Addr, r.Size}
			case r.Major == trace.MajorJITLoad && r.Minor == trace.JITMethod:
				fields, str = []uint64{pid, r.ID}, r.Name
			case r.Major == trace.MajorInterp || r.Major == trace.MajorJitted:
				fields = []uint64{pid, uint64(r.TID), r.ID & 0xffffffff, r.ID >> 32}
			default:
				return rep, fmt.Errorf("%s record %d: major 0x%x minor 0x%x is not a JProf record", daemonproto.OpJProf, i, r.Major, r.Minor)
			}
			if len(str) > 1024 {
				str = str[:1024]
			}
			ok, err := s.Fac.JProf(w, r.CPU, r.Time, r.Major, r.Minor, fields, str)
			if err != nil {
				return rep, fmt.Errorf("%s record %d: %w", daemonproto.OpJProf, i, err)
			}
			if ok {
				rep.Written++
			}
		}
		return rep, nil
	})
	s.HandleFrame(daemonproto.OpJProf, func(p server.Peer, payload []byte) (any, error) {
		if s.Fac == nil {
			return nil, fmt.Errorf("%s: this agent holds no trace facility", daemonproto.OpJProf)
		}
		w := facility.Writer{UID: p.UID, Root: p.Root()}
		if err := s.Fac.MayWrite(w); err != nil {
			return nil, fmt.Errorf("%s: %w", daemonproto.OpJProf, err)
		}
		if len(payload) < daemonproto.JProfFrameHead {
			return nil, fmt.Errorf("%s frame: %d bytes, not even the CPU's %d", daemonproto.OpJProf, len(payload), daemonproto.JProfFrameHead)
		}
		cpu := int(int32(binary.LittleEndian.Uint32(payload)))
		return jprofStream(s, w, uint64(p.PID), cpu, payload[daemonproto.JProfFrameHead:])
	})
}

// jprofStream writes the records of an agent's binary stream
// (daemonproto.JProfArgs.Stream) into cpu's trace buffer. The stream is
// the request's own: its method events get pid in place and are copied in.
func jprofStream(s *server.Server, w facility.Writer, pid uint64, cpu int, stream []byte) (daemonproto.JProfReply, error) {
	var rep daemonproto.JProfReply
	var firstErr error
	note := func(i int, ok bool, err error) {
		if err != nil && firstErr == nil {
			// the rest go on to the facility, which counts them as
			// lost when a full buffer stopped tracing
			firstErr = fmt.Errorf("%s stream record %d: %w", daemonproto.OpJProf, i, err)
		}
		if ok {
			rep.Written++
		}
	}
	err := s.Fac.JProfBatch(w, cpu, func(b *facility.JProfBatch) error {
		return readJProfStream(stream, pid, jprofSink{
			put: func(i int, t uint64, major uint16, minor uint32, fields []uint64, str string) {
				ok, err := b.Put(t, major, minor, fields, str)
				note(i, ok, err)
			},
			events: func(i int, recs []byte, t uint64) {
				n, err := b.PutEvents(recs, t)
				rep.Written += n
				note(i, false, err)
			},
		})
	})
	if err != nil {
		return rep, err
	}
	return rep, firstErr
}

// jprofSink takes the records of a stream (readJProfStream).
type jprofSink struct {
	// put takes a record decoded: its fields (the pid's replaced), its name
	put func(i int, t uint64, major uint16, minor uint32, fields []uint64, str string)
	// events takes a run of method entries and exits as they are encoded
	// (facility.EventSize bytes each, the pid's word replaced), the first
	// record i of the stream at time t, all of t's time-high half; valid
	// until events returns
	events func(i int, recs []byte, t uint64)
}

// readJProfStream gives sink each record of stream, in order, with its
// full time: each must be a JProf record (JIT_LOAD, JIT_UNLOAD, JIT_METHOD,
// a 0x30 / 0x50 method event of 4 words) in its code's layout; its
// pid field is replaced by pid, names are cut at 1024 bytes. Method
// events, nearly all of a stream, go to sink.event as they are encoded,
// their pid replaced in stream itself; the others to sink.put decoded.
// The first record that is none of these ends the stream with an error
// (the records before it were given).
func readJProfStream(stream []byte, pid uint64, sink jprofSink) error {
	var rec trace.Record
	r := trace.NewReader(stream, 0, 0, false, 0)
	fields := make([]uint64, 0, 4)
	for i := 0; ; i++ {
		// Method entries and exits without the general decoding: a
		// 28-byte record of 4 words, its first the pid.
		start := int(r.Offset())
		if size, ok := eventHead(stream[start:]); ok {
			if size != facility.EventSize {
				return fmt.Errorf("%s stream record %d: a method event is %d bytes (the header, pid, tid, id low, id high), not %d", daemonproto.OpJProf, i, facility.EventSize, size)
			}
			// (cut short, it is left to the general decoding, which says so)
			if _, t, ok := r.NextOf(binary.LittleEndian.Uint16(stream[start+2:]), binary.LittleEndian.Uint32(stream[start+4:]), trace.LayoutWords, size); ok {
				// the run of events that follow, of the same time-high half
				end := start + size
				for end+facility.EventSize <= len(stream) {
					if size, ok := eventHead(stream[end:]); !ok || size != facility.EventSize {
						break
					}
					end += facility.EventSize
				}
				r.Refill(stream[end:], int64(end))
				for p := start; p < end; p += facility.EventSize {
					binary.LittleEndian.PutUint32(stream[p+trace.HeaderSize:], uint32(pid))
				}
				sink.events(i, stream[start:end], t)
				i += (end-start)/facility.EventSize - 1
				continue
			}
		}
		ok, err := r.NextInto(&rec)
		if err != nil {
			return fmt.Errorf("%s stream: %w", daemonproto.OpJProf, err)
		}
		if !ok {
			return nil
		}
		if rec.Major == trace.MajorSys && rec.Minor == trace.SysTimeHigh {
			continue
		}
		fields = append(fields[:0], rec.Fixed...)
		str := ""
		want := trace.LayoutString
		switch {
		case rec.Major == trace.MajorJITLoad && (rec.Minor == trace.JITLoad || rec.Minor == trace.JITMethod):
			str = rec.Str
		case rec.Major == trace.MajorJITLoad && rec.Minor == trace.JITUnload:
			want = trace.LayoutFixed
		case rec.Major == trace.MajorInterp || rec.Major == trace.MajorJitted:
			want = trace.LayoutWords
			if len(fields) != 4 {
				return fmt.Errorf("%s stream record %d: a method event has 4 words (pid, tid, id low, id high), not %d", daemonproto.OpJProf, i, len(fields))
			}
		default:
			return fmt.Errorf("%s stream record %d: major 0x%x minor 0x%x is not a JProf record", daemonproto.OpJProf, i, rec.Major, rec.Minor)
		}
		if rec.Layout != want || len(fields) == 0 {
			return fmt.Errorf("%s stream record %d: major 0x%x minor 0x%x in layout %d, not %d", daemonproto.OpJProf, i, rec.Major, rec.Minor, rec.Layout, want)
		}
		fields[0] = pid
		if len(str) > 1024 {
			str = str[:1024]
		}
		sink.put(i, rec.Time, rec.Major, rec.Minor, fields, str)
	}
}

// eventHead reports whether b starts with the header of a method entry or
// exit (majors 0x30, 0x50) in the words layout, and the size it gives.
func eventHead(b []byte) (int, bool) {
	if len(b) < trace.HeaderSize {
		return 0, false
	}
	layout, size := trace.SplitTypeLen(binary.LittleEndian.Uint16(b))
	major, minor := binary.LittleEndian.Uint16(b[2:]), binary.LittleEndian.Uint32(b[4:])
	return size, layout == trace.LayoutWords && (major == trace.MajorInterp || major == trace.MajorJitted) &&
		(minor == 0x10 || minor == 0x80000010)
}

// streamArgs reads the arguments of an agent's stream request in the exact
// form the agent writes, {"cpu":N,"stream":"BASE64"}, without a second JSON
// pass over the base64 (the server has checked the line is valid JSON): a
// chunk is some 87 KB of it. ok is false for any other form (the general
// decoding takes it); err is a bad base64 or CPU.
func streamArgs(args []byte) (cpu int, stream []byte, ok bool, err error) {
	const head, mid = `{"cpu":`, `,"stream":"`
	a := bytes.TrimSpace(args)
	if !bytes.HasPrefix(a, []byte(head)) || !bytes.HasSuffix(a, []byte(`"}`)) {
		return 0, nil, false, nil
	}
	a = a[len(head) : len(a)-2]
	i := bytes.Index(a, []byte(mid))
	if i < 1 || i > 10 {
		return 0, nil, false, nil
	}
	b64 := a[i+len(mid):]
	if bytes.ContainsAny(b64, `"\`) {
		return 0, nil, false, nil
	}
	cpu, err = strconv.Atoi(string(a[:i]))
	if err != nil {
		return 0, nil, true, fmt.Errorf("cpu %q: %w", a[:i], err)
	}
	stream = make([]byte, base64.StdEncoding.DecodedLen(len(b64)))
	n, err := base64.StdEncoding.Decode(stream, b64)
	if err != nil {
		return 0, nil, true, fmt.Errorf("stream: %w", err)
	}
	return cpu, stream[:n], true, nil
}
