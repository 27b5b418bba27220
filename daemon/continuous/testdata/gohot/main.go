// gohot is a Go program of known profile for the continuous mode's tests:
// hot() does three quarters of the work, cold() one quarter, each in a
// loop of its own (leaf functions: most samples' innermost frame).
//
//	gohot [seconds of CPU time, default 3]
package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// cpuTime is the process's CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var sink uint64

//go:noinline
func hot() {
	y := sink + 1
	for i := 0; i < 3000000; i++ {
		y = y*6364136223846793005 + 1
	}
	sink = y
}

//go:noinline
func cold() {
	y := sink + 3
	for i := 0; i < 1000000; i++ {
		y = y*6364136223846793005 + 3
	}
	sink = y
}

func main() {
	d := 3 * time.Second
	if len(os.Args) > 1 {
		if s, err := strconv.ParseFloat(os.Args[1], 64); err == nil {
			d = time.Duration(s * float64(time.Second))
		}
	}
	// It runs for d of its own CPU time: as many samples on a busy machine.
	for cpuTime() < d {
		hot()
		cold()
	}
	fmt.Println("gohot done", sink != 0)
}
