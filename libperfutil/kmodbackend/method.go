package kmodbackend

import "unsafe"

// methodArg mirrors struct pitrace_method_arg (kmod/uapi/pitrace.h): one
// method entry or exit record of the caller (PITRACE_IOC_METHOD), stamped
// by the module. The JVMTI agent (tools/jprof/agent/jittrace.c) calls it
// from C; the Go mirror is for the ABI test and the ioctl fuzzer.
type methodArg struct {
	Major     uint16 // 0x30 interpreted, 0x50 jitted
	Reserved  uint16
	Minor     uint32 // entry 0x10, exit 0x80000010
	ID        uint64 // the method id (JIT_METHOD names it)
	Reserved2 uint64
}

const (
	featMethod      = 1 << 28
	methodArgSzV1   = 24
	methodEntry     = 0x10
	methodExit      = 0x80000010
	methodRecFields = 4 // u32 words: pid, tid, id low, id high
)

var iocMethod = ioc(iocWrite, 37, unsafe.Sizeof(methodArg{}))
