//go:build cgo

package main

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// The libpfm4 ABI (perfmon/pfmlib.h, 64-bit: PFM_PMU_INFO_ABI0 56 and
// PFM_EVENT_INFO_ABI0 64 bytes), declared here so that the build needs no
// libpfm4-dev: the library is opened at run time when it is installed.
typedef struct {
	const char *name;
	const char *desc;
	size_t size;
	int pmu;
	int type;
	int nevents;
	int first_event;
	int max_encoding;
	int num_cntrs;
	int num_fixed_cntrs;
	unsigned int flags; // bit 0: is_present, bit 1: is_dfl
} pi_pfm_pmu_info;

typedef struct {
	const char *name;
	const char *desc;
	const char *equiv;
	size_t size;
	uint64_t code;
	int pmu;
	int dtype;
	int idx;
	int nattrs;
	int reserved;
	unsigned int flags;
} pi_pfm_event_info;

static void *pi_pfm;
static int (*pi_initialize)(void);
static int (*pi_get_pmu_info)(int, pi_pfm_pmu_info *);
static int (*pi_get_event_next)(int);
static int (*pi_get_event_info)(int, int, pi_pfm_event_info *);

// pi_pfm_open: 0 ok, -1 no library, -2 a symbol is missing, else
// pfm_initialize's error (> 0).
static int pi_pfm_open(const char *lib)
{
	int rc;

	if (pi_pfm)
		return 0;
	pi_pfm = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!pi_pfm)
		return -1;
	pi_initialize = (int (*)(void))dlsym(pi_pfm, "pfm_initialize");
	pi_get_pmu_info = (int (*)(int, pi_pfm_pmu_info *))dlsym(pi_pfm, "pfm_get_pmu_info");
	pi_get_event_next = (int (*)(int))dlsym(pi_pfm, "pfm_get_event_next");
	pi_get_event_info = (int (*)(int, int, pi_pfm_event_info *))dlsym(pi_pfm, "pfm_get_event_info");
	if (!pi_initialize || !pi_get_pmu_info || !pi_get_event_next || !pi_get_event_info) {
		dlclose(pi_pfm);
		pi_pfm = NULL;
		return -2;
	}
	rc = pi_initialize();
	return rc == 0 ? 0 : (rc < 0 ? -rc : rc);
}

static int pi_pmu_info(int pmu, pi_pfm_pmu_info *out)
{
	memset(out, 0, sizeof(*out));
	return pi_get_pmu_info(pmu, out);
}

static int pi_event_next(int idx) { return pi_get_event_next(idx); }

static int pi_event_info(int idx, pi_pfm_event_info *out)
{
	memset(out, 0, sizeof(*out));
	return pi_get_event_info(idx, 0, out);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

const pfmLibName = "libpfm.so.4"

type pfmEvent struct{ Name, Desc string }

type pfmPMU struct {
	Name, Desc string
	NEvents    int
	NCounters  int
	Events     []pfmEvent
}

// pfmPMUs returns the PMUs libpfm4 finds on this machine (with their
// events when withEvents), or why it cannot.
func pfmPMUs(withEvents bool) ([]pfmPMU, error) {
	lib := C.CString(pfmLibName)
	defer C.free(unsafe.Pointer(lib))
	switch rc := C.pi_pfm_open(lib); {
	case rc == -1:
		return nil, errors.New("not installed (apt-get install libpfm4 for its event tables)")
	case rc == -2:
		return nil, errors.New(pfmLibName + " lacks the libpfm4 functions mpevt uses")
	case rc != 0:
		return nil, fmt.Errorf("pfm_initialize failed (error %d)", int(rc))
	}
	var out []pfmPMU
	for id := 0; id < 4096; id++ {
		var info C.pi_pfm_pmu_info
		if C.pi_pmu_info(C.int(id), &info) != 0 || info.flags&1 == 0 || info.name == nil {
			continue
		}
		p := pfmPMU{Name: C.GoString(info.name), NEvents: int(info.nevents), NCounters: int(info.num_cntrs) + int(info.num_fixed_cntrs)}
		if info.desc != nil {
			p.Desc = C.GoString(info.desc)
		}
		if withEvents {
			for idx := info.first_event; idx != -1; idx = C.pi_event_next(idx) {
				var ev C.pi_pfm_event_info
				if C.pi_event_info(idx, &ev) != 0 || ev.name == nil {
					continue
				}
				if int(ev.pmu) != id {
					break
				}
				e := pfmEvent{Name: C.GoString(ev.name)}
				if ev.desc != nil {
					e.Desc = C.GoString(ev.desc)
				}
				p.Events = append(p.Events, e)
			}
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, errors.New("libpfm4 detects no PMU on this machine")
	}
	return out, nil
}
