//go:build !cgo

package main

import "errors"

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
