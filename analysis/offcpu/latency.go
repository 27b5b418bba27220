package offcpu

import (
	"fmt"
	"io"
	"math/bits"
	"slices"
	"strings"
)

// Count is the number of waits.
func (l *Latencies) Count() int { return len(l.Ns) }

// Mean is the mean wait in ns (0 without waits).
func (l *Latencies) Mean() float64 {
	if len(l.Ns) == 0 {
		return 0
	}
	var sum float64
	for _, v := range l.Ns {
		sum += float64(v)
	}
	return sum / float64(len(l.Ns))
}

// Percentile is the wait at fraction p (0..1) of the sorted waits, by
// the nearest rank (0 without waits).
func (l *Latencies) Percentile(p float64) uint64 {
	if len(l.Ns) == 0 {
		return 0
	}
	s := slices.Clone(l.Ns)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

// Max is the longest wait.
func (l *Latencies) Max() uint64 {
	if len(l.Ns) == 0 {
		return 0
	}
	return slices.Max(l.Ns)
}

// Add adds other's waits.
func (l *Latencies) Add(other *Latencies) { l.Ns = append(l.Ns, other.Ns...) }

// Hist counts the waits in power-of-two buckets of microseconds, as
// runqlat: bucket 0 holds waits of 0 and 1 µs, bucket i > 0 those of
// [2^i, 2^(i+1) - 1] µs.
func (l *Latencies) Hist() []uint64 {
	var h []uint64
	for _, v := range l.Ns {
		i := max(bits.Len64(v/1000)-1, 0)
		for len(h) <= i {
			h = append(h, 0)
		}
		h[i]++
	}
	return h
}

// WriteHist writes the histogram in runqlat's form.
func (l *Latencies) WriteHist(w io.Writer, indent string) {
	h := l.Hist()
	var most uint64
	for _, c := range h {
		most = max(most, c)
	}
	fmt.Fprintf(w, "%s%20s : %-8s distribution\n", indent, "usecs", "count")
	for i, c := range h {
		lo, hi := uint64(1)<<i, uint64(1)<<(i+1)-1
		if i == 0 {
			lo = 0
		}
		bar := 0
		if most > 0 {
			bar = int(c * 40 / most)
		}
		fmt.Fprintf(w, "%s%9d -> %-8d : %-8d |%-40s|\n", indent, lo, hi, c, strings.Repeat("*", bar))
	}
}
