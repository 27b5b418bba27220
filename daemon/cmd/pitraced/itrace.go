package main

import (
	"encoding/json"
	"fmt"

	"perfinsp/daemon/facility"
	"perfinsp/daemon/itrace"
	"perfinsp/daemon/kevents"
	"perfinsp/daemon/server"

	itracectl "perfinsp/libperfutil/itrace"
)

// itraceSource stops the ITrace sessions when the facility stops its
// kernel event sources (swtrace off, a full buffer, free).
type itraceSource struct {
	facility.Source
	m *itrace.Manager
}

func (s *itraceSource) Stop() error {
	s.m.SetSink(nil)
	return s.Source.Stop()
}

// Flush passes on the wrapped source's (facility.Flusher).
func (s *itraceSource) Flush() {
	if f, ok := s.Source.(facility.Flusher); ok {
		f.Flush()
	}
}

// Unhold passes on the wrapped source's (facility.Holder).
func (s *itraceSource) Unhold() {
	if h, ok := s.Source.(facility.Holder); ok {
		h.Unhold()
	}
}

// UnwindStats passes on the wrapped source's (facility.UnwindReporter).
func (s *itraceSource) UnwindStats() (kevents.UnwindStats, bool) {
	if u, ok := s.Source.(facility.UnwindReporter); ok {
		return u.UnwindStats()
	}
	return kevents.UnwindStats{}, false
}

// registerITrace serves the no-module ITrace ops. The tracer writes into
// the sink the facility hands its sources when tracing turns on, so its
// records land in the per-CPU trace buffers with every other record.
func registerITrace(s *server.Server, logf func(string, ...any)) {
	m := itrace.NewManager()
	m.Log = logf
	m.Owner = s.Fac.Owner
	start := s.Fac.StartSource
	s.Fac.StartSource = func(opts kevents.Options, sink facility.Sink) (facility.Source, error) {
		src, err := start(opts, sink)
		if err != nil {
			return nil, err
		}
		m.SetSink(sink)
		return &itraceSource{Source: src, m: m}, nil
	}
	s.Handle(itracectl.OpOn, func(p server.Peer, args json.RawMessage) (any, error) {
		var a itracectl.OnArgs
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, fmt.Errorf("bad %s arguments: %w", itracectl.OpOn, err)
		}
		return m.On(itrace.Caller{PID: p.PID, UID: p.UID, GID: p.GID}, a)
	})
	s.Handle(itracectl.OpOff, func(p server.Peer, args json.RawMessage) (any, error) {
		var a itracectl.OffArgs
		if len(args) > 0 {
			if err := json.Unmarshal(args, &a); err != nil {
				return nil, fmt.Errorf("bad %s arguments: %w", itracectl.OpOff, err)
			}
		}
		return m.Off(itrace.Caller{PID: p.PID, UID: p.UID, GID: p.GID}, a)
	})
	s.Handle(itracectl.OpStatus, func(p server.Peer, _ json.RawMessage) (any, error) {
		return m.Status(itrace.Caller{PID: p.PID, UID: p.UID, GID: p.GID}), nil
	})
}
