//go:build cgo

package main

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <linux/perf_event.h>
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
static int (*pi_get_os_event_encoding)(const char *, int, int, void *);
static const char *(*pi_strerror)(int);

// pfm_perf_encode_arg_t (perfmon/pfmlib_perf_event.h, 64-bit).
typedef struct {
	struct perf_event_attr *attr;
	char **fstr;
	size_t size;
	int idx;
	int cpu;
	int flags;
	int pad0;
} pi_pfm_perf_encode_arg;

// pi_encode: libpfm4's perf_event encoding of str (PFM_OS_PERF_EVENT,
// user and kernel by default); the attr buffer is larger than any
// perf_event_attr the library may fill.
static int pi_encode(const char *str, struct perf_event_attr *attr)
{
	pi_pfm_perf_encode_arg arg;

	memset(&arg, 0, sizeof(arg));
	arg.attr = attr;
	arg.size = 0; // ABI0
	return pi_get_os_event_encoding(str, 0x1 | 0x8, 1, &arg);
}

static const char *pi_err(int rc) { return pi_strerror ? pi_strerror(rc) : "libpfm4 error"; }

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
	pi_get_os_event_encoding = (int (*)(const char *, int, int, void *))dlsym(pi_pfm, "pfm_get_os_event_encoding");
	pi_strerror = (const char *(*)(int))dlsym(pi_pfm, "pfm_strerror");
	if (!pi_initialize || !pi_get_pmu_info || !pi_get_event_next || !pi_get_event_info || !pi_get_os_event_encoding) {
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

func pfmOpen() error {
	lib := C.CString(pfmLibName)
	defer C.free(unsafe.Pointer(lib))
	switch rc := C.pi_pfm_open(lib); {
	case rc == -1:
		return errors.New("not installed (apt-get install libpfm4 for its event tables)")
	case rc == -2:
		return errors.New(pfmLibName + " lacks the libpfm4 functions mpevt uses")
	case rc != 0:
		return fmt.Errorf("pfm_initialize failed (error %d)", int(rc))
	}
	return nil
}

// pfmEncode turns a libpfm4 event name (PMU::EVENT:UMASK..., as mpevt -l
// --pfm lists them) into the perf_event encoding libpfm4 computes.
func pfmEncode(input, name string) (events.Event, error) {
	if err := pfmOpen(); err != nil {
		return events.Event{}, &events.Error{Input: input, Token: "pfm:", Reason: "libpfm4 " + err.Error()}
	}
	buf := C.malloc(4096)
	defer C.free(buf)
	C.memset(buf, 0, 4096)
	attr := (*C.struct_perf_event_attr)(buf)
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	if rc := C.pi_encode(cs, attr); rc != 0 {
		return events.Event{}, &events.Error{Input: input, Token: name, Reason: "libpfm4: " + C.GoString(C.pi_err(rc)) + " (mpevt -l --pfm lists the names)"}
	}
	e := events.Event{Name: input, Kind: events.KindPMU, Type: uint32(attr._type), Config: uint64(attr.config),
		Config1: uint64(*(*C.__u64)(unsafe.Pointer(&attr.anon1))), Config2: uint64(*(*C.__u64)(unsafe.Pointer(&attr.anon2))),
		PMU: "libpfm4", Help: "libpfm4 event " + name}
	// the perf types the kernel counts without a hardware counter
	e.Hardware = e.Type != 1 && e.Type != 2 && e.Type != 5 // software, tracepoint, breakpoint
	for _, n := range events.List() {
		if n.Type == e.Type && n.Config == e.Config {
			e.Unit, e.Help = n.Unit, n.Help+" (libpfm4 "+name+")"
		}
	}
	return e, nil
}

// pfmPMUs returns the PMUs libpfm4 finds on this machine (with their
// events when withEvents), or why it cannot.
func pfmPMUs(withEvents bool) ([]pfmPMU, error) {
	if err := pfmOpen(); err != nil {
		return nil, err
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
