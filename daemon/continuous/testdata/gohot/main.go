// gohot is a Go program of known profile for the continuous mode's tests:
// hot() does three quarters of the work, cold() one quarter, each in a
// loop of its own (leaf functions: most samples' innermost frame).
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

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
	for end := time.Now().Add(d); time.Now().Before(end); {
		hot()
		cold()
	}
	fmt.Println("gohot done", sink != 0)
}
