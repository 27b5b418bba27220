package main

import (
	"perfinsp/format/trace"
)

// timelineBeside is whether a time line without a selection is written
// beside the reading (tests compare it with the reader's).
var timelineBeside = true

// tlFeed writes the time line on a goroutine of its own, beside the
// reading: the reader copies each record into a batch and hands the
// batches over; the time line's goroutine applies the mapping records to
// a resolver of its own (as the reader applies them to its: before the
// record is given on) and writes. The records go over in their order,
// so the time line is the one the reader would have written.
type tlFeed struct {
	tl         *timeline
	batch      *tlBatch
	full, free chan *tlBatch
	done       chan struct{}
}

// tlBatch is a batch of records copied from the reader: their fixed
// fields in fixed (the reader's are written over by the next record; a
// string is the record's own) and whether each is a tick the selection
// keeps.
type tlBatch struct {
	recs     []trace.Record
	selected []bool
	fixed    []uint64
}

// tlBatchRecords is the records of a batch; tlBatches the batches made
// (those being filled, waiting and written).
const (
	tlBatchRecords = 4096
	tlBatches      = 8
)

func newTLFeed(tl *timeline) *tlFeed {
	f := &tlFeed{tl: tl, full: make(chan *tlBatch, tlBatches), free: make(chan *tlBatch, tlBatches), done: make(chan struct{})}
	for range tlBatches {
		f.free <- &tlBatch{recs: make([]trace.Record, 0, tlBatchRecords), selected: make([]bool, 0, tlBatchRecords), fixed: make([]uint64, 0, 8*tlBatchRecords)}
	}
	f.batch = <-f.free
	go f.write()
	return f
}

// record copies rec into the batch being filled, handing it over when
// full.
func (f *tlFeed) record(rec *trace.Record, selected bool) {
	b := f.batch
	at := len(b.fixed)
	b.fixed = append(b.fixed, rec.Fixed...)
	c := *rec
	c.Fixed = b.fixed[at:len(b.fixed):len(b.fixed)]
	b.recs = append(b.recs, c)
	b.selected = append(b.selected, selected)
	if len(b.recs) == tlBatchRecords {
		f.full <- b
		f.batch = <-f.free
	}
}

// write is the time line's goroutine: it takes the batches in order.
func (f *tlFeed) write() {
	defer close(f.done)
	r := f.tl.r
	for b := range f.full {
		for i := range b.recs {
			rec := &b.recs[i]
			if rec.Major == trace.MajorMTE || rec.Major == trace.MajorJITLoad {
				r.Apply(rec)
			}
			f.tl.record(rec, b.selected[i])
		}
		clear(b.recs) // (their strings)
		b.recs, b.selected, b.fixed = b.recs[:0], b.selected[:0], b.fixed[:0]
		f.free <- b
	}
}

// wait hands over the last batch and waits for the time line's goroutine
// to have taken every record.
func (f *tlFeed) wait() {
	if len(f.batch.recs) > 0 {
		f.full <- f.batch
	}
	f.batch = nil
	close(f.full)
	<-f.done
}
