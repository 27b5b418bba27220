package main

// cpuMeter sums the CPU time the target's threads have used since the
// meter first saw each of them (/proc/TID/schedstat: ns). The overhead
// budget compares the walk's costs with it. A thread that ended keeps the
// last time read; a thread's time before the meter first saw it is not
// counted (found within the 50/100 ms of a scan).
type cpuMeter struct {
	first, last map[int]uint64
	total       uint64
}

func newCPUMeter() *cpuMeter {
	return &cpuMeter{first: map[int]uint64{}, last: map[int]uint64{}}
}

// update reads the threads tids and returns the CPU time used so far.
func (m *cpuMeter) update(tids []int) uint64 {
	for _, tid := range tids {
		v, ok := threadCPUNs(tid)
		if !ok {
			continue
		}
		if _, seen := m.first[tid]; !seen {
			m.first[tid], m.last[tid] = v, v
			continue
		}
		if v > m.last[tid] {
			m.total += v - m.last[tid]
			m.last[tid] = v
		}
	}
	return m.total
}

// ns is the CPU time used so far, as of the last update.
func (m *cpuMeter) ns() uint64 { return m.total }
