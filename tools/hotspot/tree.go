package main

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"perfinsp/analysis/a2n"
)

// procTree is the target and the processes it forked: the walk samples and
// probes every thread of every one of them, and names each address with
// the mappings of the process it came from.
type procTree struct {
	root  int
	cache *a2n.Cache
	maps  map[int]*procMap
}

func newProcTree(root int, cache *a2n.Cache) (*procTree, error) {
	pm, err := newProcMap(root, cache)
	if err != nil {
		return nil, err
	}
	return &procTree{root: root, cache: cache, maps: map[int]*procMap{root: pm}}, nil
}

// mapOf returns the mappings of process pid, read the first time pid is
// seen (nil if it is gone by then).
func (t *procTree) mapOf(pid int) *procMap {
	if pm, ok := t.maps[pid]; ok {
		return pm
	}
	pm, err := newProcMap(pid, t.cache)
	if err != nil {
		pm = nil
	}
	t.maps[pid] = pm
	return pm
}

// readNew reads the mappings of the tree's processes not seen yet: a
// child that ends before one of its addresses is named (its hits are read
// after it exited: the rings are read every few milliseconds, every close
// while the probes are removed) is still named from them. A mapping read
// before an exec is read again at the first address it does not cover,
// while the process lives.
func (t *procTree) readNew() {
	for _, pid := range t.processes() {
		t.mapOf(pid)
	}
}

// lookup names addr of process pid.
func (t *procTree) lookup(pid int, addr uint64) Func {
	pm := t.mapOf(pid)
	if pm == nil {
		return Func{Name: fmt.Sprintf("[exited %d %#x]", pid, addr), NoProbe: "the process ended before its mappings were read"}
	}
	return pm.lookup(addr)
}

// processes lists root and its descendants (parents first).
func (t *procTree) processes() []int {
	return descendants(t.root)
}

// threads lists the threads of root and of its descendants.
func (t *procTree) threads() ([]int, error) {
	var out []int
	for i, pid := range t.processes() {
		tids, err := threadsOf(pid)
		if err != nil {
			if i == 0 {
				return nil, err // the target itself is gone
			}
			continue // a child that ended meanwhile
		}
		out = append(out, tids...)
	}
	return out, nil
}

// descendants returns pid and every process below it, from the kernel's
// /proc/PID/task/TID/children lists (or, without them, from the parent
// field of every /proc/PID/stat).
func descendants(pid int) []int {
	out := []int{pid}
	seen := map[int]bool{pid: true}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children"); err != nil {
		return descendantsByScan(pid)
	}
	for i := 0; i < len(out); i++ {
		p := strconv.Itoa(out[i])
		tasks, _ := os.ReadDir("/proc/" + p + "/task")
		for _, task := range tasks {
			b, err := os.ReadFile("/proc/" + p + "/task/" + task.Name() + "/children")
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if c, err := strconv.Atoi(f); err == nil && !seen[c] {
					seen[c] = true
					out = append(out, c)
				}
			}
		}
	}
	return out
}

func descendantsByScan(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	kids := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := statField(statFields(p), 1); ok {
			kids[int(pp)] = append(kids[int(pp)], p)
		}
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		c := kids[out[i]]
		sort.Ints(c)
		out = append(out, c...)
	}
	return out
}

// statFields returns the fields of /proc/PID/stat after the command name
// (0: state, 1: ppid, ..., 11: utime, 12: stime, 13: cutime, 14: cstime).
func statFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	j := strings.LastIndexByte(s, ')')
	if j < 0 {
		return nil
	}
	return strings.Fields(s[j+1:])
}

// statField returns field i of statFields.
func statField(f []string, i int) (uint64, bool) {
	if i >= len(f) {
		return 0, false
	}
	v, err := strconv.ParseUint(f[i], 10, 64)
	return v, err == nil
}

// cpuNs is the CPU time of the tree so far: each live process's own (user
// and system) plus that of its children already reaped, which the kernel
// adds to the parent's (/proc/PID/stat, clock ticks).
func (t *procTree) cpuNs() (uint64, bool) {
	var sum uint64
	ok := false
	for _, pid := range t.processes() {
		var v uint64
		good := true
		f := statFields(pid)
		for _, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime
			x, k := statField(f, i)
			good = good && k
			v += x
		}
		if good {
			sum += v
			ok = true
		}
	}
	return sum * 1e9 / clockTicks, ok
}
