// Package cpustat reads per-CPU time accounting from /proc/stat and turns
// two readings into busy, idle and interrupt shares: PI's AboveIdle.
package cpustat

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Times are one CPU's cumulative times in clock ticks (USER_HZ).
type Times struct {
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal uint64
}

// Sample is one reading: "cpu" (all CPUs) first, then cpu0, cpu1, ...
type Sample struct {
	Names []string
	Times []Times
}

// Read reads /proc/stat.
func Read() (*Sample, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil, fmt.Errorf("read /proc/stat: %w", err)
	}
	return Parse(b)
}

// Parse parses /proc/stat text.
func Parse(b []byte) (*Sample, error) {
	s := &Sample{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		if len(f) < 9 {
			return nil, fmt.Errorf("/proc/stat: %s line has %d fields, need 8 times", f[0], len(f)-1)
		}
		var v [8]uint64
		for i := range v {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("/proc/stat: %s field %d: %w", f[0], i+1, err)
			}
			v[i] = n
		}
		s.Names = append(s.Names, f[0])
		s.Times = append(s.Times, Times{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]})
	}
	if len(s.Names) == 0 {
		return nil, fmt.Errorf("/proc/stat has no cpu lines")
	}
	return s, nil
}

// Share is the split of an interval, in percent.
type Share struct {
	Name                string
	Busy, Idle, Intr    float64
	BusyTicks, AllTicks uint64
}

// Between returns each CPU's share of the interval between two samples.
func Between(a, b *Sample) []Share {
	var out []Share
	for i, name := range b.Names {
		if i >= len(a.Names) || a.Names[i] != name {
			continue
		}
		x, y := a.Times[i], b.Times[i]
		d := func(p, q uint64) uint64 {
			if q < p {
				return 0
			}
			return q - p
		}
		busy := d(x.User, y.User) + d(x.Nice, y.Nice) + d(x.System, y.System) + d(x.Steal, y.Steal)
		idle := d(x.Idle, y.Idle) + d(x.IOWait, y.IOWait)
		intr := d(x.IRQ, y.IRQ) + d(x.SoftIRQ, y.SoftIRQ)
		all := busy + idle + intr
		sh := Share{Name: name, BusyTicks: busy, AllTicks: all}
		if all > 0 {
			sh.Busy = 100 * float64(busy) / float64(all)
			sh.Idle = 100 * float64(idle) / float64(all)
			sh.Intr = 100 * float64(intr) / float64(all)
		}
		out = append(out, sh)
	}
	return out
}
