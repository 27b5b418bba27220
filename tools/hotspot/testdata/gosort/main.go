// Command gosort is a Go target of the hot-spot walk's tests: workers
// goroutines sort the same pseudo-random strings over and over until its
// standard input ends, then it prints a checksum of the sorted strings and
// whether every round sorted them alike (output that does not depend on
// how long it ran), and exits 0.
//
//	gosort [WORKERS] < control
package main

import (
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
)

func words(n int) []string {
	out := make([]string, n)
	x := uint64(88172645463325252)
	for i := range out {
		b := make([]byte, 8+i%9)
		for j := range b {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			b[j] = 'a' + byte(x%26)
		}
		out[i] = string(b)
	}
	return out
}

// round sorts a copy of in and returns its checksum.
func round(in []string) uint64 {
	s := append([]string(nil), in...)
	sort.Strings(s)
	h := fnv.New64a()
	for _, w := range s {
		io.WriteString(h, w)
	}
	return h.Sum64()
}

func worker(in []string, want uint64, stop *atomic.Bool, alike *atomic.Bool, rounds *atomic.Int64) {
	for !stop.Load() {
		if round(in) != want {
			alike.Store(false)
		}
		rounds.Add(1)
	}
}

func main() {
	workers := 4
	if len(os.Args) > 1 {
		workers, _ = strconv.Atoi(os.Args[1])
	}
	in := words(20000)
	want := round(in)
	var stop, alike atomic.Bool
	var rounds atomic.Int64
	alike.Store(true)
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); worker(in, want, &stop, &alike, &rounds) }()
	}
	fmt.Fprintln(os.Stderr, "gosort: running")
	io.Copy(io.Discard, os.Stdin)
	stop.Store(true)
	wg.Wait()
	fmt.Printf("gosort: %d workers, checksum %016x, every round alike: %v\n", workers, want, alike.Load())
	fmt.Fprintf(os.Stderr, "gosort: %d rounds\n", rounds.Load())
}
