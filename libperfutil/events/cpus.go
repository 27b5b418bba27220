package events

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// OnlineCPUs lists the online CPUs (/sys/devices/system/cpu/online).
func OnlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("read online CPUs: %w", err)
	}
	return ParseCPUList(string(b))
}

// ParseCPUList parses the kernel's CPU list format ("0-3,6,8-9").
func ParseCPUList(s string) ([]int, error) {
	var cpus []int
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("CPU list %q: bad CPU %q", s, lo)
		}
		z := a
		if isRange {
			if z, err = strconv.Atoi(hi); err != nil || z < a {
				return nil, fmt.Errorf("CPU list %q: bad range %q", s, part)
			}
		}
		for c := a; c <= z; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
