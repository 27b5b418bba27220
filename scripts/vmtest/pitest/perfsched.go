package main

// pitest perfsched PROG N [g]: PROG N (the ping-pong) under perf's own
// recording of the scheduler tracepoints, as `perf record -e
// sched:sched_switch -e sched:sched_wakeup -e sched:sched_wakeup_new [-g]`
// takes them (system-wide, one ring per event and CPU, samples with the
// tracepoint's raw data; with g, sched_switch's samples carry their call
// chain): the load's own figure and perf's bytes per sched_switch sample,
// beside the module's (the bench mode of the VM test).

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// perfRing is one event's ring on one CPU.
type perfRing struct {
	fd   int
	ring []byte
}

func (r *perfRing) close() {
	if r.ring != nil {
		_ = unix.Munmap(r.ring)
	}
	unix.Close(r.fd)
}

// openSchedRing opens tracepoint name on cpu with a 16 MB ring, disabled.
func openSchedRing(name string, cpu int, chain bool) (*perfRing, error) {
	id, err := tracepointID(name)
	if err != nil {
		return nil, err
	}
	attr := unix.PerfEventAttr{
		Type:        unix.PERF_TYPE_TRACEPOINT,
		Config:      id,
		Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample:      1,
		Sample_type: unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_CPU | unix.PERF_SAMPLE_PERIOD | unix.PERF_SAMPLE_RAW,
		Bits:        unix.PerfBitDisabled,
	}
	if chain {
		attr.Sample_type |= unix.PERF_SAMPLE_CALLCHAIN
		attr.Sample_max_stack = 127
	}
	fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("perf_event_open(%s, cpu %d): %w", name, cpu, err)
	}
	ring, err := unix.Mmap(fd, 0, (1+4096)*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mmap perf ring: %w", err)
	}
	return &perfRing{fd: fd, ring: ring}, nil
}

func perfSched(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: pitest perfsched PROG N [g]")
	}
	chain := len(args) > 2 && args[2] == "g"
	var rings []*perfRing
	defer func() {
		for _, r := range rings {
			r.close()
		}
	}()
	switches := map[*perfRing]bool{}
	for cpu := 0; cpu < runtime.NumCPU(); cpu++ {
		for _, ev := range []string{"sched/sched_switch", "sched/sched_wakeup", "sched/sched_wakeup_new"} {
			r, err := openSchedRing(ev, cpu, chain && ev == "sched/sched_switch")
			if err != nil {
				return err
			}
			rings = append(rings, r)
			switches[r] = ev == "sched/sched_switch"
		}
	}
	for _, r := range rings {
		if err := unix.IoctlSetInt(r.fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			return err
		}
	}
	out, err := exec.Command(args[0], args[1]).CombinedOutput()
	for _, r := range rings {
		_ = unix.IoctlSetInt(r.fd, unix.PERF_EVENT_IOC_DISABLE, 0)
	}
	if err != nil {
		return fmt.Errorf("%s: %v: %s", args[0], err, out)
	}
	var sw, samples int
	var bytes uint64
	for _, r := range rings {
		meta := (*unix.PerfEventMmapPage)(unsafe.Pointer(&r.ring[0]))
		if meta.Data_head > meta.Data_size {
			return fmt.Errorf("a perf ring wrapped (%d bytes): the comparison would be unfair", meta.Data_head)
		}
		n := ringSamples(r.ring, meta)
		samples += n
		bytes += meta.Data_head
		if switches[r] {
			sw += n
		}
	}
	if sw == 0 {
		return fmt.Errorf("no sched_switch sample")
	}
	what := "perf sched_switch, sched_wakeup, sched_wakeup_new"
	if chain {
		what += ", sched_switch -g"
	}
	fmt.Fprintf(os.Stdout, "%s; %s: %d sched_switch samples, %d samples: %d bytes, %.1f per sched_switch\n",
		strings.TrimSpace(string(out)), what, sw, samples, bytes, float64(bytes)/float64(sw))
	return nil
}
