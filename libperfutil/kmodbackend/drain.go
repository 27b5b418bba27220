package kmodbackend

import (
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"perfinsp/format/nrm2"
	"perfinsp/libperfutil/control"
)

func loadU32(p *uint32) uint32 { return atomic.LoadUint32(p) }

// OpDrain is the agent op that drains the module's wrap and cont buffers:
// the client passes a /dev/pitrace descriptor and the stream file, both
// opened with its own rights, and the agent (pitraced, see docs/agent.md)
// runs Drain on them until tracing stops.
const OpDrain = "kmod-drain"

// Drain copies complete segments from the module's buffers to stream while
// tracing is on, gives them back to the module, and completes the file when
// tracing stops. dev is an open /dev/pitrace; Drain owns dev and stream.
// attached is called once: with nil when Drain has attached as the module's
// drainer, or with the error that kept it from attaching.
func Drain(dev, stream *os.File, attached func(error)) (err error) {
	defer dev.Close()
	done := false
	defer func() {
		if !done {
			attached(err)
		}
	}()
	b, err := newBackend(dev)
	if err != nil {
		stream.Close()
		return err
	}
	st, err := b.status()
	if err != nil {
		stream.Close()
		return err
	}
	onCount := st.OnCount
	ms, err := mapAll(b, st)
	if err != nil {
		stream.Close()
		return err
	}
	defer ms.unmap()
	// Start the file before attaching: a drainer that cannot write never
	// attaches, and On reports its failure instead of tracing into nothing.
	s, err := nrm2.StartStream(stream, header(st))
	if err != nil {
		return err
	}
	if err := b.ioctl(iocDrain, nil); err != nil {
		s.Abort()
		return fmt.Errorf("attach as the drainer: %w", err)
	}
	done = true
	attached(nil)
	if ev := eventChunk(st); ev != nil {
		s.Chunk(nrm2.ChunkTrace, 0, ev)
	}
	d := &drainer{b: b, ms: ms, s: s, mode: st.Mode}
	fds := []unix.PollFd{{Fd: int32(b.fd), Events: unix.POLLIN}}
	for {
		if err := d.once(false); err != nil {
			s.Abort()
			return err
		}
		st, err = b.status()
		if err != nil {
			s.Abort()
			return err
		}
		if st.State != stateOn || st.OnCount != onCount {
			break
		}
		_, _ = unix.Poll(fds, 200)
	}
	// Tracing is off: the module completed every partial segment.
	if err := d.once(true); err != nil {
		s.Abort()
		return err
	}
	stats, err := b.stats(st)
	if err != nil {
		// the buffers were freed under us: statistics from the mappings
		stats = ms.stats()
	}
	if err := s.Finish(0, stats); err != nil {
		return err
	}
	if st.Mode == control.ModeCont && st.State == stateOff {
		_ = b.ioctl(iocSaved, nil)
	}
	return nil
}

// IsDevice checks that f is the pitrace character device (the same device
// number as /dev/pitrace): the agent checks descriptors clients pass.
func IsDevice(f *os.File) error {
	var a, b unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &a); err != nil {
		return err
	}
	if err := unix.Stat(Device, &b); err != nil {
		return fmt.Errorf("%s: %w", Device, err)
	}
	if a.Mode&unix.S_IFMT != unix.S_IFCHR || a.Rdev != b.Rdev {
		return fmt.Errorf("the descriptor passed is not %s", Device)
	}
	return nil
}

type drainer struct {
	b    *Backend
	ms   *mappings
	s    *nrm2.Stream
	mode uint32
}

// once copies out the DONE segments of the drained buffers. final adds the
// wrap-mode trace ring (oldest first) after tracing stopped.
func (d *drainer) once(final bool) error {
	for cpu := 0; cpu < d.ms.ncpu; cpu++ {
		for _, kind := range []int{kindMTE, kindTrace} {
			drained := d.mode == control.ModeCont || kind == kindMTE || final
			if !drained {
				continue
			}
			m := d.ms.buf(cpu, kind)
			for _, seg := range m.segments(false) {
				d.s.Chunk(chunkKind(kind), cpu, m.data(seg))
				r := releaseArg{CPU: uint32(cpu), Kind: uint32(kind), Seg: uint32(seg.idx), Seq: seg.seq}
				if err := d.b.ioctl(iocRelease, unsafe.Pointer(&r)); err != nil && err != unix.ENODATA {
					return fmt.Errorf("give back segment %d of CPU %d: %w", seg.idx, cpu, err)
				}
			}
		}
	}
	return nil
}

// stats reads the counts from the mapped headers.
func (ms *mappings) stats() []nrm2.CPUStats {
	out := make([]nrm2.CPUStats, ms.ncpu)
	for cpu := range out {
		t, m := ms.buf(cpu, kindTrace).hdr, ms.buf(cpu, kindMTE).hdr
		out[cpu] = nrm2.CPUStats{Records: t.Records, Lost: t.Lost, MTERecords: m.Records, MTELost: m.Lost, Bytes: t.Bytes}
	}
	return out
}
