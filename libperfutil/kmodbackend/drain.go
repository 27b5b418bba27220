package kmodbackend

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/control"
	"perfinsp/libperfutil/nrm2"
)

func loadU32(p *uint32) uint32 { return atomic.LoadUint32(p) }

// drainMain is the drainer process (see the package comment): it copies
// complete segments to the stream file while tracing is on, gives them back
// to the module, and finalizes the file when tracing stops.
func drainMain(path string) int {
	if err := drain(path); err != nil {
		fmt.Fprintf(os.Stderr, "pitrace drainer %d: %v\n", os.Getpid(), err)
		return 1
	}
	return 0
}

type drainer struct {
	b    *Backend
	ms   *mappings
	w    *nrm2.Writer
	mode uint32
}

func drain(path string) error {
	b, err := Open()
	if err != nil {
		return err
	}
	defer b.Close()
	st, err := b.status()
	if err != nil {
		return err
	}
	onCount := st.OnCount
	ms, err := mapAll(b, st)
	if err != nil {
		return err
	}
	defer ms.unmap()
	// Create the file before attaching: a drainer that cannot write never
	// attaches, and On reports its failure instead of tracing into nothing.
	w, err := nrm2.Create(path, header(st))
	if err != nil {
		return err
	}
	if err := b.ioctl(iocDrain, nil); err != nil {
		w.Abort()
		return fmt.Errorf("attach as the drainer: %w", err)
	}
	// /proc/kallsyms takes long to read on a big kernel: read it while
	// draining (segments cannot wait) and write it at the end.
	kallsyms := make(chan []byte, 1)
	go func() {
		ks, _ := os.ReadFile("/proc/kallsyms")
		kallsyms <- ks
	}()
	d := &drainer{b: b, ms: ms, w: w, mode: st.Mode}
	fds := []unix.PollFd{{Fd: int32(b.fd), Events: unix.POLLIN}}
	for {
		if err := d.once(false); err != nil {
			w.Abort()
			return err
		}
		st, err = b.status()
		if err != nil {
			w.Abort()
			return err
		}
		if st.State != stateOn || st.OnCount != onCount {
			break
		}
		if _, err := unix.Poll(fds, 200); err != nil && err != unix.EINTR {
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Tracing is off: the module completed every partial segment.
	if err := d.once(true); err != nil {
		w.Abort()
		return err
	}
	if ks := <-kallsyms; len(ks) > 0 {
		if err := w.WriteChunk(nrm2.ChunkKallsyms, 0, ks); err != nil {
			w.Abort()
			return err
		}
	}
	stats, err := b.stats(st)
	if err != nil {
		// the buffers were freed under us: statistics from the mappings
		stats = ms.stats()
	}
	if err := w.Close(0, stats); err != nil {
		return err
	}
	if st.Mode == control.ModeCont && st.State == stateOff {
		_ = b.ioctl(iocSaved, nil)
	}
	return nil
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
			for _, s := range m.segments(false) {
				if err := d.w.WriteChunk(chunkKind(kind), uint32(cpu), m.data(s)); err != nil {
					return err
				}
				r := releaseArg{CPU: uint32(cpu), Kind: uint32(kind), Seg: uint32(s.idx), Seq: s.seq}
				if err := d.b.ioctl(iocRelease, unsafe.Pointer(&r)); err != nil && err != unix.ENODATA {
					return fmt.Errorf("give back segment %d of CPU %d: %w", s.idx, cpu, err)
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
