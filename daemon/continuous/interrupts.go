package continuous

// Interrupt time (Config.Interrupts): from the kernel's hard-interrupt and
// softirq entry and exit records, the time each CPU spent in a handler,
// charged to the thread it took the CPU from (the thread switched in last
// on that CPU, from the scheduler's switch records), in nanoseconds per
// (thread, handler): what PI's per-thread metrics factor out of a
// thread's own time, exported so that a fleet view shows which services'
// threads lose time to interrupts and to which. A handler interrupted by
// another (a hard interrupt during a softirq) is charged its own time
// only. Interrupts of the idle task and those begun before the agent saw
// the CPU's first switch are not charged to any thread.

import (
	"os"
	"slices"
	"strconv"

	"perfinsp/format/trace"
)

// maxIntrDepth bounds the nesting followed on a CPU: deeper (entries
// whose exits were lost), the CPU's handlers start anew.
const maxIntrDepth = 8

// intrFrame is a handler under way on a CPU.
type intrFrame struct {
	minor  uint32 // trace.IntrHard or trace.IntrSoft
	vec    uint32 // the irq number or the softirq vector
	start  uint64
	nested uint64 // time in the handlers that interrupted it
}

// cpuIntr is one CPU's state: the thread running on it, the handlers
// under way.
type cpuIntr struct {
	pid, tid uint32
	known    bool // a switch on the CPU was seen: pid and tid are its thread
	frames   []intrFrame
}

// intrTracker follows the CPUs for the sink (under its lock).
type intrTracker struct {
	cpus map[int]*cpuIntr
}

func newIntrTracker() *intrTracker { return &intrTracker{cpus: map[int]*cpuIntr{}} }

func (it *intrTracker) cpu(cpu int) *cpuIntr {
	c := it.cpus[cpu]
	if c == nil {
		c = &cpuIntr{}
		it.cpus[cpu] = c
	}
	return c
}

// switched notes the thread switched in on cpu (0: the idle task).
func (it *intrTracker) switched(cpu int, pid, tid uint32) {
	c := it.cpu(cpu)
	c.pid, c.tid, c.known = pid, tid, true
}

// charge is a handler's time to count: ns of the handler (minor, vec)
// for thread tid of pid.
type charge struct {
	pid, tid   uint32
	minor, vec uint32
	ns         uint64
}

// record applies an interrupt record (minor with trace.ExitBit at an
// exit) of cpu at t; ok when it ends a handler whose time is charged.
func (it *intrTracker) record(cpu int, t uint64, minor uint32, vec uint32) (ch charge, ok bool) {
	c := it.cpu(cpu)
	kind := minor &^ trace.ExitBit
	if minor&trace.ExitBit == 0 {
		if len(c.frames) >= maxIntrDepth {
			c.frames = c.frames[:0]
		}
		c.frames = append(c.frames, intrFrame{minor: kind, vec: vec, start: t})
		return charge{}, false
	}
	n := len(c.frames)
	if n == 0 {
		return charge{}, false // its entry came before the agent started, or was lost
	}
	f := c.frames[n-1]
	if f.minor != kind || f.vec != vec || t < f.start {
		c.frames = c.frames[:0] // a record lost: start anew
		return charge{}, false
	}
	c.frames = c.frames[:n-1]
	total := t - f.start
	if n > 1 {
		c.frames[n-2].nested += total
	}
	own := total - min(f.nested, total)
	if !c.known || c.tid == 0 || own == 0 {
		return charge{}, false
	}
	return charge{pid: c.pid, tid: c.tid, minor: kind, vec: vec, ns: own}, true
}

// softirqNames are the kernel's softirq vectors (include/linux/interrupt.h).
var softirqNames = []string{"HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU"}

// intrName is the frame that stands for a handler in the profile:
// "softirq NET_RX", "hardirq 24 virtio0-input.0" (the names of the irq's
// handlers from /proc/irq/N, when there).
func intrName(minor, vec uint32) string {
	if minor == trace.IntrSoft {
		if int(vec) < len(softirqNames) {
			return "softirq " + softirqNames[vec]
		}
		return "softirq " + strconv.Itoa(int(vec))
	}
	name := "hardirq " + strconv.Itoa(int(vec))
	ents, err := os.ReadDir("/proc/irq/" + strconv.Itoa(int(vec)))
	if err != nil {
		return name
	}
	var actions []string
	for _, e := range ents {
		if e.IsDir() {
			actions = append(actions, e.Name())
		}
	}
	slices.Sort(actions)
	for _, a := range actions {
		name += " " + a
	}
	return name
}

// intrModule is the module of the handlers' frames.
const intrModule = "[interrupt]"

// interrupt counts a handler's time in the current interval: one sample
// per (thread, handler), its stack the one frame of the handler.
func (a *aggregator) interrupt(e *event) {
	iv := a.cur
	minor, vec, ns := e.minor, uint32(e.fields[0]), int64(e.fields[1])
	key := intrKey{pid: e.pid, tid: e.tid, minor: minor, vec: vec}
	if sc, ok := iv.intr[key]; ok {
		sc.count += ns
		iv.intrNS += ns
		return
	}
	if len(iv.intr) >= a.limits.Stacks {
		iv.intrDropped += ns
		return
	}
	lk := locKey{kind: locProcess, module: intrModule, addr: uint64(minor)<<32 | uint64(vec)}
	idx, ok := iv.locIndex[lk]
	if !ok {
		if len(iv.locs) >= a.limits.Locations {
			iv.intrDropped += ns
			return
		}
		idx = int32(len(iv.locs))
		iv.locs = append(iv.locs, location{key: lk, fn: frameName{module: intrModule, symbol: intrName(minor, vec)}})
		iv.locIndex[lk] = idx
	}
	if _, ok := iv.procs[e.pid]; !ok && len(iv.procs) < a.limits.Stacks {
		iv.procs[e.pid] = a.infos.get(e.pid)
	}
	a.know(e.pid, e.t)
	a.counted(iv, e.pid, e.tid)
	sc := &stackCount{pid: e.pid, tid: e.tid, locs: []int32{idx}, count: ns}
	iv.intr[key] = sc
	iv.intrOrder = append(iv.intrOrder, sc)
	iv.intrNS += ns
}

// intrKey is a thread's handler in an interval.
type intrKey struct {
	pid, tid, minor, vec uint32
}
