package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"perfinsp/internal/perfring"
	"perfinsp/libperfutil/events"
)

// HotFunc is one function of the sampling step.
type HotFunc struct {
	Func
	Samples int     `json:"samples"`
	Pct     float64 `json:"pct"`
}

// SampleResult is what the sampling step saw.
type SampleResult struct {
	Seconds float64   `json:"seconds"`
	RateHz  int       `json:"rate_hz"` // samples per second of a thread's CPU time
	Samples int       `json:"samples"`
	Lost    uint64    `json:"lost"`
	Funcs   []HotFunc `json:"functions"` // every sampled function, most samples first
}

// maxSampleHz is the sampling rate when a sample costs little (or no
// budget is set): samples per second of a thread's CPU time.
const maxSampleHz = 1000

// openSampler opens the sampling event on thread tid: cpu-clock, user
// mode, a sample (IP, TID) every periodNs of the thread's CPU time.
func openSampler(tid int, periodNs uint64) (int, error) {
	ev, err := events.Parse("cpu-clock")
	if err != nil {
		return -1, fmt.Errorf("cpu-clock: %w", err)
	}
	a := ev.Attr()
	a.Size = uint32(unsafe.Sizeof(a))
	a.Sample = periodNs
	a.Sample_type = unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID
	a.Bits |= unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv
	fd, err := unix.PerfEventOpen(&a, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return -1, err
		}
		return -1, events.OpenError(ev, tid, -1, err)
	}
	return fd, nil
}

// sampleTarget samples the threads of the tree with cpu-clock (user mode,
// rateHz samples per second of CPU time per thread; the threads and
// processes created meanwhile are found every 50 ms) for d or until the
// target ends, and names the functions hit, each address with the
// mappings of its own process. meter follows the threads' CPU time.
func sampleTarget(ctx context.Context, tree *procTree, d time.Duration, rateHz int, meter *cpuMeter, alive func() bool) (SampleResult, error) {
	pid := tree.root
	tids, err := tree.threads()
	if err != nil {
		return SampleResult{}, err
	}
	meter.update(tids)
	if rateHz <= 0 || rateHz > maxSampleHz {
		rateHz = maxSampleHz
	}
	type tr struct {
		fd   int
		ring *perfring.Ring
	}
	var rings []tr
	defer func() {
		for _, r := range rings {
			r.ring.Close()
			unix.Close(r.fd)
		}
	}()
	sampled := map[int]bool{}
	attach := func(tids []int) error {
		for _, tid := range tids {
			if sampled[tid] {
				continue
			}
			sampled[tid] = true
			fd, err := openSampler(tid, uint64(1e9/rateHz))
			if err != nil {
				if errors.Is(err, unix.ESRCH) {
					continue // the thread ended meanwhile
				}
				return err
			}
			r, err := perfring.Map(fd, 16)
			if err != nil {
				unix.Close(fd)
				return err
			}
			rings = append(rings, tr{fd, r})
		}
		return nil
	}
	if err := attach(tids); err != nil {
		return SampleResult{}, err
	}
	if len(rings) == 0 {
		return SampleResult{}, fmt.Errorf("process %d has no thread left to sample", pid)
	}
	type where struct {
		pid  int
		addr uint64
	}
	hits := map[where]int{}
	res := SampleResult{}
	drain := func() {
		for _, r := range rings {
			r.ring.Drain(func(typ uint32, _ uint16, b []byte) {
				if typ == unix.PERF_RECORD_SAMPLE && len(b) >= 16 {
					w := where{int(binary.LittleEndian.Uint32(b[8:])), binary.LittleEndian.Uint64(b)}
					if hits[w] == 0 {
						tree.mapOf(w.pid) // while the process lives (a short child)
					}
					hits[w]++
					res.Samples++
				}
			})
		}
	}
	start := time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
loop:
	for time.Since(start) < d && alive() {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
			drain()
			// New threads and child processes (polled every 50 ms).
			if tids, err := tree.threads(); err == nil {
				meter.update(tids)
				if err := attach(tids); err != nil {
					return SampleResult{}, err
				}
			}
		}
	}
	drain()
	if tids, err := tree.threads(); err == nil {
		meter.update(tids)
	}
	res.Seconds = time.Since(start).Seconds()
	res.RateHz = rateHz
	for _, r := range rings {
		res.Lost += r.ring.Lost
	}
	byFunc := map[string]*HotFunc{}
	for w, n := range hits {
		f := tree.lookup(w.pid, w.addr)
		k := f.key()
		if f.Path == "" {
			k = f.Name
		}
		h := byFunc[k]
		if h == nil {
			h = &HotFunc{Func: f}
			byFunc[k] = h
		}
		h.Samples += n
	}
	for _, h := range byFunc {
		if res.Samples > 0 {
			h.Pct = 100 * float64(h.Samples) / float64(res.Samples)
		}
		res.Funcs = append(res.Funcs, *h)
	}
	sort.Slice(res.Funcs, func(i, j int) bool {
		if res.Funcs[i].Samples != res.Funcs[j].Samples {
			return res.Funcs[i].Samples > res.Funcs[j].Samples
		}
		return res.Funcs[i].Name < res.Funcs[j].Name
	})
	return res, nil
}

// pickHot selects the hot functions: every function at or above threshold
// percent of the samples, at most top of them (top 0: no limit).
func pickHot(r SampleResult, threshold float64, top int) []HotFunc {
	var out []HotFunc
	for _, f := range r.Funcs {
		if f.Pct < threshold {
			break
		}
		if top > 0 && len(out) >= top {
			break
		}
		out = append(out, f)
	}
	return out
}
