package cliutil

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseSize parses a size as the commands' options take it: a byte count,
// or a number followed by K, M or G (powers of 1024; KiB, MiB and GiB
// too, any case). Negative numbers, other suffixes and sizes past int64
// are errors; 0 is the caller's to accept or not.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}} {
		if len(t) > len(u.suffix) && strings.EqualFold(t[len(t)-len(u.suffix):], u.suffix) {
			t, mult = t[:len(t)-len(u.suffix)], u.mult
			break
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 || v > math.MaxInt64/mult {
		return 0, fmt.Errorf("bad size %q: use a number of bytes with an optional K, M or G suffix", s)
	}
	return v * mult, nil
}

// SizeName is n bytes as ParseSize reads them: in the largest unit that
// divides it (8M, 512K, 3G), else a byte count.
func SizeName(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dG", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return strconv.FormatInt(n, 10)
}
