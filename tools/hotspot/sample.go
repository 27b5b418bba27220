package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
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
	Seconds float64 `json:"seconds"`
	// Stretched: sampled past the time asked, the target having run too
	// little in it for minSamples samples.
	Stretched bool      `json:"stretched,omitempty"`
	RateHz    int       `json:"rate_hz"` // samples per second of a thread's CPU time
	Samples   int       `json:"samples"`
	Lost      uint64    `json:"lost"`
	Funcs     []HotFunc `json:"functions"` // every sampled function, most samples first
	// stacks counts the sampled user stacks (frame-pointer call chains):
	// the key is the pid (4 bytes) then the addresses (8 bytes each), the
	// sampled IP first, then the return addresses.
	stacks map[string]int
}

// maxStack bounds the frames of a sampled call chain.
const maxStack = 64

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
	a.Sample_type = unix.PERF_SAMPLE_IP | unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_CALLCHAIN
	a.Bits |= unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv | unix.PerfBitExcludeCallchainKernel
	a.Sample_max_stack = maxStack
	fd, err := unix.PerfEventOpen(&a, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return -1, err
		}
		return -1, events.OpenError(ev, tid, -1, err)
	}
	return fd, nil
}

// minSamples and stretchSampling: a target that ran too little in the
// sampling time for minSamples samples (a machine busy with other work
// gives it little CPU) is sampled on, up to stretchSampling times that
// time, so the walk starts from hot functions, not from none.
const (
	minSamples      = 50
	stretchSampling = 10
)

// sampleTarget samples the threads of the tree with cpu-clock (user mode,
// rateHz samples per second of CPU time per thread; the threads and
// processes created meanwhile are found every 50 ms) for d, longer while
// it has fewer than minSamples samples (up to stretchSampling times d),
// or until the target ends, and names the functions hit, each address
// with the mappings of its own process. meter follows the threads' CPU
// time.
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
	res := SampleResult{stacks: map[string]int{}}
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
					if k := stackKeyOf(b); k != "" {
						res.stacks[k]++
					}
				}
			})
		}
	}
	start := time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	enough := func() bool {
		el := time.Since(start)
		return el >= d && (res.Samples >= minSamples || el >= stretchSampling*d)
	}
loop:
	for !enough() && alive() {
		res.Stretched = res.Stretched || time.Since(start) >= d
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

// stackKeyOf is the stacks key of a sample record (IP, pid/tid,
// callchain): the pid, then the user addresses of the chain without the
// context markers ("" if it has none).
func stackKeyOf(b []byte) string {
	if len(b) < 24 {
		return ""
	}
	n := binary.LittleEndian.Uint64(b[16:])
	if n > maxStack+8 || uint64(len(b)-24) < 8*n {
		return ""
	}
	key := make([]byte, 4, 4+8*n)
	copy(key, b[8:12])
	for i := uint64(0); i < n; i++ {
		a := binary.LittleEndian.Uint64(b[24+8*i:])
		if a >= 1<<64-4096 { // PERF_CONTEXT_USER and the other markers
			continue
		}
		key = binary.LittleEndian.AppendUint64(key, a)
	}
	if len(key) < 4+16 { // no caller
		return ""
	}
	return string(key)
}

// RootPath is a path from a function up to its thread's root, as sampled.
type RootPath struct {
	Path    []string `json:"path"` // the callers, nearest first
	Samples int      `json:"samples"`
}

// rootPaths returns the paths from f up to the roots of the sampled stacks
// that go through f (as a caller, or as the sampled function), most
// samples first (at most 3), and the number of such stacks.
func (r SampleResult) rootPaths(tree *procTree, f Func) ([]RootPath, int) {
	counts := map[string]int{}
	paths := map[string][]string{}
	total := 0
	for k, n := range r.stacks {
		pid := int(binary.LittleEndian.Uint32([]byte(k[:4])))
		var addrs []uint64
		for i := 4; i+8 <= len(k); i += 8 {
			addrs = append(addrs, binary.LittleEndian.Uint64([]byte(k[i:i+8])))
		}
		at := -1
		for i, a := range addrs {
			if i > 0 {
				a-- // a return address: its call is before it
			}
			if g := tree.lookup(pid, a); g.Path == f.Path && g.Off == f.Off && g.Name == f.Name {
				at = i
				break
			}
		}
		if at < 0 {
			continue
		}
		var path []string
		for _, a := range addrs[at+1:] {
			path = append(path, tree.lookup(pid, a-1).Name)
		}
		if len(path) == 0 {
			continue
		}
		total += n
		pk := strings.Join(path, ";")
		counts[pk] += n
		paths[pk] = path
	}
	var out []RootPath
	for pk, n := range counts {
		out = append(out, RootPath{Path: paths[pk], Samples: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Samples != out[j].Samples {
			return out[i].Samples > out[j].Samples
		}
		return strings.Join(out[i].Path, ";") < strings.Join(out[j].Path, ";")
	})
	if len(out) > 3 {
		out = out[:3]
	}
	return out, total
}

// addRootPaths gives the functions whose callers the probes did not see
// their paths to the root from the sampled stacks.
func addRootPaths(funcs []*FuncStat, r SampleResult, tree *procTree) {
	for _, f := range funcs {
		if len(f.Callers) == 0 {
			f.RootPaths, f.RootSamples = r.rootPaths(tree, f.Func)
		}
	}
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
