//go:build !cgo

package main

import (
	"errors"

	"perfinsp/libperfutil/events"
)

const pfmLibName = "libpfm.so.4"

type pfmEvent struct{ Name, Desc string }

type pfmPMU struct {
	Name, Desc string
	NEvents    int
	NCounters  int
	Events     []pfmEvent
}

// pfmPMUs: a build without cgo cannot open libpfm4.
func pfmPMUs(bool) ([]pfmPMU, error) {
	return nil, errors.New("this mpevt was built without cgo: it cannot load libpfm4 (build with CGO_ENABLED=1)")
}

// pfmEncode: a build without cgo cannot use libpfm4's encodings.
func pfmEncode(input, name string) (events.Event, error) {
	return events.Event{}, &events.Error{Input: input, Token: "pfm:", Reason: "this mpevt was built without cgo: it cannot load libpfm4"}
}
