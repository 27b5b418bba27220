package tprof

import (
	"sync/atomic"

	"perfinsp/analysis/a2n"
	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// Options are what a report is built with besides its trace and resolver.
type Options struct {
	// Filter selects the ticks counted (nil: all); the others are counted
	// in the report's Filtered.
	Filter *Filter
	// OnRecord, if not nil, is given every record in time order, a tick's
	// name with it (nil for other records and for ticks Filter leaves
	// out); its res is only valid during the call. It makes the one
	// reader read the trace.
	OnRecord func(rec *trace.Record, res *a2n.Result)
	// Unnamed gives OnRecord the ticks unnamed: a tick the selection
	// keeps with an empty Result (not to be written to), one it leaves
	// out with nil; for an OnRecord that needs no names (naming every
	// tick as it is read costs).
	Unnamed bool
	// Addresses keeps what Profile needs to give each location its
	// address, mapping and source line (BuildWithAddresses).
	Addresses bool
	// Progress, if not nil, counts the bytes of the trace read.
	Progress *Progress
}

// BuildWith builds the report of f as opt says (Build, BuildFiltered and
// BuildWithAddresses are its short forms).
func BuildWith(f *nrm2.File, r *a2n.Resolver, opt Options) *Report {
	b := newBuilder(f, r, opt.Filter, opt.OnRecord)
	b.keepAddrs = opt.Addresses
	b.unnamed = opt.Unnamed
	b.progress = opt.Progress
	return b.build()
}

// Progress counts the bytes of a trace a build has read: Read may be
// called from another goroutine while the build runs.
type Progress struct {
	n atomic.Int64
}

// Read is the number of bytes read so far.
func (p *Progress) Read() int64 {
	if p == nil {
		return 0
	}
	return p.n.Load()
}

func (p *Progress) add(n int) {
	if p != nil {
		p.n.Add(int64(n))
	}
}

// restart counts from zero (the trace is read again).
func (p *Progress) restart() {
	if p != nil {
		p.n.Store(0)
	}
}

// TraceBytes is the size of f's records (its trace and MTE chunks'
// data): what a build reads.
func TraceBytes(f *nrm2.File) int64 {
	var n int64
	for _, c := range f.Chunks {
		if c.Kind == nrm2.ChunkTrace || c.Kind == nrm2.ChunkMTE {
			n += int64(len(c.Data))
		}
	}
	return n
}
