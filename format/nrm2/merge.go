package nrm2

import (
	"errors"
	"fmt"

	"perfinsp/format/trace"
)

// stream is the ordered records of one CPU's trace or MTE chunks.
type stream struct {
	chunks []Chunk
	ci     int
	c      *Chunk // the chunk r reads
	r      *trace.Reader
	cur    trace.Record
	seq    int
	file   *File
}

func (s *stream) advance() (bool, error) {
	for {
		if s.r == nil {
			if s.ci >= len(s.chunks) {
				return false, nil
			}
			s.c = &s.chunks[s.ci]
			s.ci++
			s.r = trace.NewReader(s.c.Data, s.c.Offset, int(s.c.CPU), s.c.Kind == ChunkMTE, 0)
		}
		ok, err := s.r.NextInto(&s.cur)
		if err != nil {
			if !s.file.salvage {
				return false, err
			}
			s.skip(err)
			continue
		}
		if !ok {
			s.r = nil
			continue
		}
		return true, nil
	}
}

// skip records a record that does not decode and moves on to the next
// TIME_HIGH record of the chunk (the next segment), or the next chunk.
func (s *stream) skip(err error) {
	bad := s.r.Offset()
	msg := err.Error()
	var de *trace.DecodeError
	if errors.As(err, &de) {
		msg = de.Msg
		if de.Offset != bad {
			msg += fmt.Sprintf(" (at byte offset %d)", de.Offset)
		}
	}
	skipped, found := s.r.Resync()
	to := "the end of its chunk"
	if found {
		to = fmt.Sprintf("the next segment (TIME_HIGH record at byte offset %d)", bad+int64(skipped))
	} else {
		s.r = nil
	}
	s.file.recDamage = append(s.file.recDamage, Damage{Offset: bad, Lost: int64(skipped), CPU: int(s.c.CPU), Kind: s.c.Kind,
		Msg: fmt.Sprintf("a %s record of CPU %d does not decode: %s; skipped %d bytes to %s", kindName(s.c.Kind), s.c.CPU, msg, skipped, to)})
}

// before reports whether stream a's current record comes before b's: by
// time, MTE first at equal times (names before uses), then file order.
func before(a, b *stream) bool {
	if a.cur.Time != b.cur.Time {
		return a.cur.Time < b.cur.Time
	}
	if a.cur.MTE != b.cur.MTE {
		return a.cur.MTE
	}
	return a.seq < b.seq
}

// linearMerge is the number of streams up to which a linear scan for the
// earliest one beats a heap (two streams per CPU: a usual trace has few).
const linearMerge = 8

// streamHeap is a binary min-heap of streams ordered by before.
type streamHeap []*stream

func (h streamHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && before(h[r], h[l]) {
			m = r
		}
		if !before(h[m], h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// Records calls fn for every record of the file, all CPUs' MTE and trace
// buffers merged in time order. TIME_HIGH records are included. fn's record
// is only valid during the call. A file read with Options.Salvage never
// stops on a record that does not decode: the rest of its segment is
// skipped and listed by Damage; otherwise the first such record ends
// Records with a *trace.DecodeError.
func (f *File) Records(fn func(r *trace.Record) error) error {
	f.Populate() // every record is read
	return f.records(f.BufferStreams(), fn)
}

// RecordsOf is Records of the streams of one kind (ChunkTrace, ChunkMTE)
// alone, in the same order.
func (f *File) RecordsOf(kind uint32, fn func(r *trace.Record) error) error {
	var ss []BufferStream
	for _, s := range f.BufferStreams() {
		if s.Kind == kind {
			ss = append(ss, s)
		}
	}
	return f.records(ss, fn)
}

// BufferStream is the chunks of one CPU's trace or MTE buffer, in file order.
// Seq is its place among the file's streams: Records gives the records of
// equal times MTE first, then by Seq.
type BufferStream struct {
	Seq       int
	Kind, CPU uint32
	Chunks    []Chunk
}

// BufferStreams returns the file's streams in Seq order.
func (f *File) BufferStreams() []BufferStream {
	byKey := map[[2]uint32]int{}
	var out []BufferStream
	for _, c := range f.Chunks {
		k := [2]uint32{c.Kind, c.CPU}
		i, ok := byKey[k]
		if !ok {
			i = len(out)
			byKey[k] = i
			out = append(out, BufferStream{Seq: i, Kind: c.Kind, CPU: c.CPU})
		}
		out[i].Chunks = append(out[i].Chunks, c)
	}
	return out
}

// chunkRecords decodes each record of c into rec and calls fn (if not
// nil) with it; a record that does not decode ends it with its error.
func chunkRecords(c Chunk, rec *trace.Record, fn func(r *trace.Record) error) error {
	r := trace.NewReader(c.Data, c.Offset, int(c.CPU), c.Kind == ChunkMTE, 0)
	for {
		ok, err := r.NextInto(rec)
		if err != nil || !ok {
			return err
		}
		if fn != nil {
			if err := fn(rec); err != nil {
				return err
			}
		}
	}
}

func (f *File) records(ss []BufferStream, fn func(r *trace.Record) error) error {
	f.recDamage = nil
	order := make([]*stream, len(ss))
	for i, st := range ss {
		order[i] = &stream{seq: st.Seq, file: f, chunks: st.Chunks}
	}
	var live []*stream
	for _, s := range order {
		ok, err := s.advance()
		if err != nil {
			return err
		}
		if ok {
			live = append(live, s)
		}
	}
	if len(live) > linearMerge {
		return mergeHeap(live, fn)
	}
	for len(live) > 0 {
		mi := 0
		for i := 1; i < len(live); i++ {
			if before(live[i], live[mi]) {
				mi = i
			}
		}
		s := live[mi]
		if err := fn(&s.cur); err != nil {
			return err
		}
		ok, err := s.advance()
		if err != nil {
			return err
		}
		if !ok {
			live = append(live[:mi], live[mi+1:]...)
		}
	}
	return nil
}

// mergeHeap is the merge of Records for many streams (many CPUs).
func mergeHeap(live []*stream, fn func(r *trace.Record) error) error {
	h := streamHeap(live)
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
	for len(h) > 0 {
		s := h[0]
		if err := fn(&s.cur); err != nil {
			return err
		}
		ok, err := s.advance()
		if err != nil {
			return err
		}
		if !ok {
			h[0] = h[len(h)-1]
			h = h[:len(h)-1]
		}
		h.down(0)
	}
	return nil
}
