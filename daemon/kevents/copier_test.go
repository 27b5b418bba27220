//go:build cgo

package kevents

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"perfinsp/internal/perfring"
)

// mappedRing is a ring in mapped memory (as the copier needs) of
// dataPages pages of data.
func mappedRing(t *testing.T, dataPages int) *perfring.Ring {
	ps := unix.Getpagesize()
	mem, err := unix.Mmap(-1, 0, (dataPages+1)*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(mem) })
	return perfring.FromMemory(mem, ps)
}

// kernelWrite writes a record into r as the kernel does (the bytes, then
// data_head), false when the reader has not left room for it.
func kernelWrite(r *perfring.Ring, typ uint32, body []byte) bool {
	meta, data := r.Layout()
	head, tail := atomic.LoadUint64(&meta.Data_head), atomic.LoadUint64(&meta.Data_tail)
	n := uint64(8 + len(body))
	if head+n-tail > uint64(len(data)) {
		return false
	}
	rec := binary.LittleEndian.AppendUint32(nil, typ)
	rec = binary.LittleEndian.AppendUint16(rec, 0)
	rec = binary.LittleEndian.AppendUint16(rec, uint16(n))
	rec = append(rec, body...)
	for i, b := range rec {
		data[(head+uint64(i))&uint64(len(data)-1)] = b
	}
	atomic.StoreUint64(&meta.Data_head, head+n)
	return true
}

// The copier moves whole records only, in order and intact, across the
// ends of both rings; what does not fit in the spill ring stays in the
// kernel's, beginning at a record, so that reading the spill ring and
// then the kernel's gives every record once. The spill ring gives back
// the pages each drain read, and no record is harmed by it.
func TestCopierMovesWholeRecords(t *testing.T) {
	k := mappedRing(t, 2)
	s := mappedRing(t, 4)
	_, sdata := s.Layout()
	s.BeforeTail = pageReleaser(sdata)
	rng := rand.New(rand.NewSource(1))
	var want, got [][]byte
	collect := func(typ uint32, misc uint16, body []byte) {
		got = append(got, append(binary.LittleEndian.AppendUint32(nil, typ), body...))
	}
	fulls, seq := 0, uint32(0)
	for round := 0; round < 2000; round++ {
		// The kernel writes until its ring is full or a burst ends.
		for burst := rng.Intn(40); burst > 0; burst-- {
			body := make([]byte, 8*rng.Intn(60))
			for i := range body {
				body[i] = byte(rng.Intn(256)) | 1 // never a zeroed page's byte
			}
			if !kernelWrite(k, 1000+seq, body) {
				break
			}
			want = append(want, append(binary.LittleEndian.AppendUint32(nil, 1000+seq), body...))
			seq++
		}
		if full, _ := copyPass(k, s); full {
			fulls++
		}
		if rng.Intn(3) == 0 { // the reader, now and then
			s.Drain(collect)
		}
	}
	// The stop: the spill ring full, records left in the kernel's.
	for full := false; !full; {
		for kernelWrite(k, 1000+seq, make([]byte, 8*(1+int(seq%50)))) {
			want = append(want, append(binary.LittleEndian.AppendUint32(nil, 1000+seq), make([]byte, 8*(1+int(seq%50)))...))
			seq++
		}
		full, _ = copyPass(k, s)
	}
	s.Drain(collect)
	k.Drain(collect) // after the copier's stop: what it left
	if fulls == 0 {
		t.Fatalf("the spill ring was never full: the test misses its case")
	}
	if len(got) != len(want) {
		t.Fatalf("%d records written, %d read", len(want), len(got))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("record %d: %s, want %s", i, short(got[i]), short(want[i]))
		}
	}
	if s.Corrupt+k.Corrupt != 0 {
		t.Fatalf("corrupt headers: %d in the spill ring, %d in the kernel's", s.Corrupt, k.Corrupt)
	}
	t.Logf("%d records, the spill ring full %d times", len(want), fulls)
}

func short(b []byte) string {
	if len(b) > 12 {
		return fmt.Sprintf("%x… (%d bytes)", b[:12], len(b))
	}
	return fmt.Sprintf("%x", b)
}

// A header the kernel would never write (a size under 8) ends the
// copier's pass instead of looping on it: what fits is handed on, and
// the reader counts the corrupt header and skips to the head; the copier
// takes no more than the spill ring's room.
func TestCopierCorruptHeader(t *testing.T) {
	k := mappedRing(t, 1)
	s := mappedRing(t, 1)
	if !kernelWrite(k, 7, make([]byte, 16)) {
		t.Fatal("kernel ring full")
	}
	meta, data := k.Layout()
	head := atomic.LoadUint64(&meta.Data_head)
	binary.LittleEndian.PutUint64(data[head:], 0) // size 0
	atomic.StoreUint64(&meta.Data_head, head+uint64(len(data)/2))
	_, moved := copyPass(k, s)
	smeta, _ := s.Layout()
	if !moved || smeta.Data_head > uint64(len(data)) {
		t.Fatalf("moved %v, spill head %d (room %d)", moved, smeta.Data_head, len(data))
	}
	var n int
	s.Drain(func(typ uint32, misc uint16, body []byte) { n++ })
	if n != 1 || s.Corrupt != 1 {
		t.Fatalf("%d records read (want the one before the bad header), %d corrupt headers (want 1)", n, s.Corrupt)
	}
	if _, moved := copyPass(k, s); moved {
		t.Fatalf("a second pass moved more: the kernel ring's bytes were all handed on")
	}
}
