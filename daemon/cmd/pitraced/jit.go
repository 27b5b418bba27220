package main

import (
	"encoding/json"
	"fmt"

	"perfinsp/daemon/server"
	"perfinsp/format/trace"
	"perfinsp/internal/daemonproto"
)

// registerJProf serves the JVMTI agent's records (docs/jprof.md): JIT code
// loads/unloads and method names for tprof's names, method entry/exit for
// merged trees. Every record is the caller's process: the pid is taken from
// the connection's credentials.
func registerJProf(s *server.Server, logf func(string, ...any)) {
	s.Handle(daemonproto.OpJProf, func(p server.Peer, args json.RawMessage) (any, error) {
		if s.Fac == nil {
			return nil, fmt.Errorf("%s: this agent holds no trace facility", daemonproto.OpJProf)
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
			ok, err := s.Fac.JProf(r.CPU, r.Time, r.Major, r.Minor, fields, str)
			if err != nil {
				return rep, fmt.Errorf("%s record %d: %w", daemonproto.OpJProf, i, err)
			}
			if ok {
				rep.Written++
			}
		}
		return rep, nil
	})
}
