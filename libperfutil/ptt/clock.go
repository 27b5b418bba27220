package ptt

import (
	"fmt"
	_ "unsafe" // go:linkname
)

// nanotime is the runtime's CLOCK_MONOTONIC read through the vDSO (no system
// call while the clocksource is tsc).
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

func errShortVals(have, need int) error {
	return fmt.Errorf("ptt: read needs %d value slots, got %d", need, have)
}
