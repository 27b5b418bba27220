package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/ptt"
)

// pttMod checks perf metrics on the module backend: (a) the Go PTT library
// with tsc,page-faults (page faults counted per thread, current to the last
// state change; tsc against raw rdtsc), (b) the ptt tool's module holder
// (ptt on -p / dump --json / off) on a busy child. pttBin is the Go
// tools/ptt binary. One line per check; every failed check prints a FAIL
// line and the command exits non-zero.
func pttMod(args []string) error {
	pttBin := "/bin/ptt"
	if len(args) > 0 {
		pttBin = args[0]
	}
	c := &checker{}
	c.library()
	c.tool(pttBin)
	if c.failed > 0 {
		return fmt.Errorf("%d checks failed", c.failed)
	}
	fmt.Println("pttmod: ok")
	return nil
}

type checker struct{ failed int }

func (c *checker) check(ok bool, format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	if ok {
		fmt.Println("pttmod: " + msg)
		return
	}
	c.failed++
	fmt.Println("pttmod: FAIL: " + msg)
}

func (c *checker) library() {
	os.Setenv(ptt.EnvBackend, "kmod")
	defer os.Unsetenv(ptt.EnvBackend)
	if err := ptt.Init("tsc", "page-faults"); err != nil {
		c.check(false, "ptt.Init(tsc, page-faults) on the module: %v", err)
		return
	}
	defer ptt.Terminate()
	g, err := ptt.GetGuarantees()
	c.check(err == nil && g.Backend == "kmod" && len(g.Metrics) == 2 && strings.Contains(g.Metrics[1].Path, "last dispatch/interrupt"),
		"guarantees: backend %s, page-faults read path %q (%v)", g.Backend, func() string {
			if len(g.Metrics) == 2 {
				return g.Metrics[1].Path
			}
			return ""
		}(), err)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	th, err := ptt.CurrentThread()
	if err != nil {
		c.check(false, "CurrentThread: %v", err)
		return
	}
	defer th.Close()

	// 1000 fresh pages: one fault each (no huge pages).
	pg := os.Getpagesize()
	mem, err := unix.Mmap(-1, 0, 1000*pg, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		c.check(false, "mmap 1000 pages: %v", err)
		return
	}
	defer unix.Munmap(mem)
	_ = unix.Madvise(mem, unix.MADV_NOHUGEPAGE)
	time.Sleep(time.Millisecond) // a state change: the area is current
	_, f0, err := th.Read2()
	if err != nil {
		c.check(false, "read: %v", err)
		return
	}
	for i := 0; i < 1000; i++ {
		mem[i*pg] = 1
	}
	_, fMid, _ := th.Read2()
	time.Sleep(time.Millisecond) // a state change brings the perf metric up to date
	_, f1, _ := th.Read2()
	d, n, _ := th.AreaCounts()
	c.check(f1-f0 >= 1000 && f1-f0 < 1100, "page-faults: 1000 pages touched: +%d after a 1 ms sleep (+%d before it: current to the last state change); dispatches %d, interrupts %d",
		f1-f0, fMid-f0, d, n)

	// A busy loop: virtualized tsc against raw rdtsc. Interrupts come in
	// bursts (under the strict VM kernel, slub_debug makes the RCU softirq
	// that frees the previous tests' objects slow): the best of three
	// loops shows what the virtualization itself leaves out. Without
	// -icount the TSC follows the host's clock, and a host that takes the
	// vCPU away while the guest handles an interrupt makes the handler
	// long: beside a busy host (load 9) the best of three left out 6.4 %.
	// The bound says the virtualized count neither stalls nor runs ahead
	// of the raw one; the -icount run checks the figures exactly.
	const maxLeftOut = 15 // % of the raw count
	var dv, dr, p1 uint64
	var pct float64
	x := uint64(1)
	for try := 0; try < 3; try++ {
		r0 := rdtsc() // the raw window holds the virtualized one (pttgo)
		v0, pf0, _ := th.Read2()
		for i := 0; i < 20_000_000; i++ {
			x = x*6364136223846793005 + uint64(i)
		}
		v1, pf1, _ := th.Read2()
		r1 := rdtsc()
		tdv, tdr := v1-v0, r1-r0
		tpct := 100 * (float64(tdr) - float64(tdv)) / float64(tdr)
		fmt.Printf("pttmod: tsc: busy loop %d: virtualized %d cycles, raw %d (%.3f %% left out)\n", try+1, tdv, tdr, tpct)
		if try == 0 || math.Abs(tpct) < math.Abs(pct) {
			dv, dr, pct, p1 = tdv, tdr, tpct, pf1-pf0
		}
		if v1 > v0 && tdv <= tdr && math.Abs(tpct) <= maxLeftOut {
			break
		}
	}
	c.check(dv > 0 && dv <= dr && math.Abs(pct) <= maxLeftOut, "tsc: busy loop (best of up to 3): virtualized %d cycles, raw rdtsc %d (%.3f %% left out: interrupts), page-faults meanwhile +%d, x=%d",
		dv, dr, pct, p1, x&1)
}

// dumpJSON is the part of tools/ptt's Dump this check reads.
type dumpJSON struct {
	Backend string `json:"backend"`
	Threads []struct {
		Pid           int               `json:"pid"`
		Tid           int               `json:"tid"`
		Name          string            `json:"name"`
		Values        map[string]uint64 `json:"values"`
		Dispatches    *uint64           `json:"dispatches"`
		Interrupts    *uint64           `json:"interrupts"`
		InterruptTime *uint64           `json:"interrupt_time"`
		IntrValues    map[string]uint64 `json:"interrupt_values"`
		Exited        bool              `json:"exited"`
	} `json:"threads"`
	CPUs []struct {
		CPU        int               `json:"cpu"`
		Interrupts uint64            `json:"interrupts"`
		TSC        uint64            `json:"tsc"`
		Values     map[string]uint64 `json:"values"`
	} `json:"cpus"`
	Errors []string `json:"errors"`
}

func (c *checker) tool(pttBin string) {
	help, _ := exec.Command(pttBin, "--help").CombinedOutput()
	if !strings.Contains(string(help), "dump") {
		c.check(false, "%s is not the Go ptt tool (tools/ptt): the C checker scripts/vmtest/progs/ptt.c is installed as /bin/ptt too; build tools/ptt under another name and run pitest pttmod PATH", pttBin)
		return
	}
	dir, err := os.MkdirTemp("", "pttmod")
	if err != nil {
		c.check(false, "temp dir: %v", err)
		return
	}
	defer os.RemoveAll(dir)
	env := append(os.Environ(), "PTT_SOCKET="+filepath.Join(dir, "ptt.sock"), ptt.EnvBackend+"=kmod")
	run := func(args ...string) (string, error) {
		cmd := exec.Command(pttBin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// cpuburn: two busy threads plus a busy forked child, on two CPUs:
	// every thread is preempted. Its own process group, killed at the end.
	child := exec.Command("/bin/cpuburn", "100000")
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := child.Start(); err != nil {
		c.check(false, "start cpuburn: %v", err)
		return
	}
	pid := child.Process.Pid
	defer func() {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = child.Wait()
	}()
	time.Sleep(300 * time.Millisecond) // its worker thread is up
	out, err := run("on", "-m", "tsc,page-faults", "-p", strconv.Itoa(pid))
	c.check(err == nil && strings.Contains(out, "backend kmod"), "ptt on -m tsc,page-faults -p %d: %v: %s", pid, err, strings.TrimSpace(out))
	if err != nil {
		return
	}
	off := false
	defer func() {
		if !off {
			_, _ = run("off")
		}
	}()
	time.Sleep(time.Second)
	out, err = run("dump", "--json")
	var d dumpJSON
	if err == nil {
		err = json.Unmarshal([]byte(out), &d)
	}
	if err != nil {
		c.check(false, "ptt dump --json: %v: %s", err, out)
		return
	}
	c.check(d.Backend == "kmod", "dump backend %q, %d threads, %d CPU buckets, errors %v", d.Backend, len(d.Threads), len(d.CPUs), d.Errors)
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var tids []int
	for _, e := range ents {
		if t, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, t)
		}
	}
	sort.Ints(tids)
	listed := map[int]bool{}
	for _, t := range d.Threads {
		if t.Pid != pid {
			c.check(false, "thread %d of pid %d listed for target %d", t.Tid, t.Pid, pid)
			continue
		}
		listed[t.Tid] = true
		disp, intr, itime := "nil", "nil", "nil"
		if t.Dispatches != nil {
			disp = strconv.FormatUint(*t.Dispatches, 10)
		}
		if t.Interrupts != nil {
			intr = strconv.FormatUint(*t.Interrupts, 10)
		}
		if t.InterruptTime != nil {
			itime = strconv.FormatUint(*t.InterruptTime, 10)
		}
		c.check(t.Values["tsc"] > 0 && t.Dispatches != nil && *t.Dispatches > 0 && t.Interrupts != nil,
			"tid %d (%s): tsc %d, page-faults %d, dispatches %s, interrupts %s, interrupt tsc %s (interrupt page-faults %d)",
			t.Tid, t.Name, t.Values["tsc"], t.Values["page-faults"], disp, intr, itime, t.IntrValues["page-faults"])
	}
	missing := 0
	for _, t := range tids {
		if !listed[t] {
			missing++
		}
	}
	c.check(len(tids) >= 2 && missing == 0, "cpuburn pid %d: threads %v, %d of them not in the dump", pid, tids, missing)
	best := -1
	for i, b := range d.CPUs {
		if best < 0 || b.Interrupts > d.CPUs[best].Interrupts {
			best = i
		}
	}
	if best < 0 {
		c.check(false, "no CPU bucket in the dump")
	} else {
		b := d.CPUs[best]
		c.check(b.Interrupts > 0, "CPU %d bucket: %d interrupts, %d tsc cycles, values %v", b.CPU, b.Interrupts, b.TSC, b.Values)
	}
	if txt, err := run("dump"); err == nil {
		for _, l := range strings.Split(strings.TrimRight(txt, "\n"), "\n") {
			fmt.Println("  " + l)
		}
	} else {
		c.check(false, "ptt dump: %v: %s", err, txt)
	}
	out, err = run("off")
	off = true
	c.check(err == nil && strings.Contains(out, "ptt off"), "ptt off: %v %s", err, strings.TrimSpace(out))
	if _, err := run("dump"); err == nil {
		c.check(false, "ptt dump after off succeeded")
	}

	// ptt info names the module and what it promises for perf metrics.
	out, err = run("info")
	c.check(err == nil && strings.Contains(out, "active backend: kmod") && strings.Contains(out, "last dispatch/interrupt"),
		"ptt info: active backend kmod, perf metrics current to the last dispatch/interrupt (%v)", err)
	if err != nil || !strings.Contains(out, "active backend: kmod") {
		fmt.Println(out)
	}

	// -a: every thread of every process, default metric (tsc).
	out, err = run("on", "-a")
	c.check(err == nil && strings.Contains(out, "tsc for every thread"), "ptt on -a: %v: %s", err, strings.TrimSpace(out))
	if err != nil {
		return
	}
	time.Sleep(500 * time.Millisecond)
	out, err = run("dump", "--json")
	var da dumpJSON
	if err == nil {
		err = json.Unmarshal([]byte(out), &da)
	}
	procs := map[int]bool{}
	for _, t := range da.Threads {
		procs[t.Pid] = true
	}
	c.check(err == nil && len(procs) >= 3 && procs[pid], "ptt dump -a: %d threads of %d processes (cpuburn %d among them: %v), errors %d (%v)",
		len(da.Threads), len(procs), pid, procs[pid], len(da.Errors), err)
	out, err = run("off")
	c.check(err == nil, "ptt off after -a: %v %s", err, strings.TrimSpace(out))
}
