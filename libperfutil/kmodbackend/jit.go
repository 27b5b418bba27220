package kmodbackend

import "unsafe"

// jitArg mirrors struct pitrace_jit_arg (kmod/uapi/pitrace.h): one JIT_LOAD,
// JIT_UNLOAD or JIT_METHOD record of the caller (PITRACE_IOC_JIT). The
// JVMTI agent (tools/jprof/agent/jittrace.c) calls it from C; the Go mirror
// is for the ABI test and the ioctl fuzzer.
type jitArg struct {
	Minor    uint32
	NameLen  uint32
	Addr     uint64
	Size     uint64 // JIT_METHOD: the method id
	Name     uint64 // user pointer
	Reserved uint64
}

const (
	featJIT      = 1 << 26
	jitNameMax   = 480
	jitArgSzV1   = 40
	majorJITLoad = 0x14
)

var iocJIT = ioc(iocWrite, 36, unsafe.Sizeof(jitArg{}))
