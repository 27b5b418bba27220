package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/control"
	"perfinsp/libperfutil/kmodbackend"
)

var ioc = kmodbackend.IoctlNumbers()

func iocSize(req uintptr) int { return int(req>>16) & 0x3fff }

func openDev() (*os.File, error) {
	f, err := os.OpenFile(kmodbackend.Device, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", kmodbackend.Device, err)
	}
	return f, nil
}

func rawIoctl(fd uintptr, req uintptr, arg uintptr) unix.Errno {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, fd, req, arg)
	return e
}

// call issues req with buf (sized to the ioctl's size) as the argument.
func call(fd uintptr, name string, buf []byte) unix.Errno {
	req := ioc[name]
	if len(buf) == 0 {
		return rawIoctl(fd, req, 0)
	}
	return rawIoctl(fd, req, uintptr(unsafe.Pointer(&buf[0])))
}

func arg(name string) []byte { return make([]byte, iocSize(ioc[name])) }

func expect(what string, got, want unix.Errno) error {
	if got != want {
		return fmt.Errorf("%s: got %v (%d), want %v (%d)", what, got, int(got), want, int(want))
	}
	fmt.Printf("badinput: %-55s -> %v\n", what, errName(got))
	return nil
}

func errName(e unix.Errno) string {
	if e == 0 {
		return "ok"
	}
	return unix.ErrnoName(e)
}

func stateOf(fd uintptr) (uint32, error) {
	b := arg("PITRACE_IOC_STATUS")
	if e := call(fd, "PITRACE_IOC_STATUS", b); e != 0 {
		return 0, e
	}
	return binary.LittleEndian.Uint32(b[4:]), nil
}

func badInput() error {
	f, err := openDev()
	if err != nil {
		return err
	}
	defer f.Close()
	fd := f.Fd()
	checks := []func() error{
		func() error { return expect("free", call(fd, "PITRACE_IOC_FREE", nil), 0) },
		func() error { return expect("on before init", call(fd, "PITRACE_IOC_ON", nil), unix.EINVAL) },
		func() error { return expect("off when not on", call(fd, "PITRACE_IOC_OFF", nil), unix.EINVAL) },
		func() error {
			return expect("unknown command (right magic, nr 99)", rawIoctl(fd, 0xE1<<8|99, 0), unix.ENOTTY)
		},
		func() error {
			return expect("unknown command (other magic)", rawIoctl(fd, 0x5401, 0), unix.ENOTTY)
		},
		func() error {
			// the size scheme: below the ABI 1 size is no ioctl of the module
			return expect("known nr, size below ABI 1's", rawIoctl(fd, ioc["PITRACE_IOC_STATUS"]-(8<<16), 0), unix.ENOTTY)
		},
		func() error {
			return expect("known nr, wrong direction", rawIoctl(fd, ioc["PITRACE_IOC_STATUS"]&^(uintptr(2)<<30)|(1<<30), 0), unix.ENOTTY)
		},
		func() error {
			// a newer caller's longer struct is accepted: here the pointer is bad
			return expect("known nr, longer struct, NULL pointer", rawIoctl(fd, ioc["PITRACE_IOC_STATUS"]+(1<<16), 0), unix.EFAULT)
		},
		func() error {
			return expect("status to a NULL pointer", rawIoctl(fd, ioc["PITRACE_IOC_STATUS"], 0), unix.EFAULT)
		},
		func() error {
			return expect("init from a kernel address", rawIoctl(fd, ioc["PITRACE_IOC_INIT"], 0xffffffff81000000), unix.EFAULT)
		},
		func() error {
			b := arg("PITRACE_IOC_INIT")
			binary.LittleEndian.PutUint64(b[0:], 100)
			binary.LittleEndian.PutUint64(b[8:], 1<<20)
			return expect("init with a 100-byte trace buffer", call(fd, "PITRACE_IOC_INIT", b), unix.EINVAL)
		},
		func() error {
			b := arg("PITRACE_IOC_INIT")
			binary.LittleEndian.PutUint64(b[0:], 1<<30)
			binary.LittleEndian.PutUint64(b[8:], 1<<30)
			if e := expect("init with 1G + 1G per CPU (more than memory)", call(fd, "PITRACE_IOC_INIT", b), unix.ENOMEM); e != nil {
				return e
			}
			if s, _ := stateOf(fd); s != 0 {
				return fmt.Errorf("state %d after a failed init, want 0 (free): half-allocated", s)
			}
			return nil
		},
		func() error {
			b := arg("PITRACE_IOC_INIT")
			binary.LittleEndian.PutUint64(b[0:], 1<<30+1)
			binary.LittleEndian.PutUint64(b[8:], 1<<20)
			return expect("init with more than 1G per CPU", call(fd, "PITRACE_IOC_INIT", b), unix.EINVAL)
		},
		func() error {
			b := arg("PITRACE_IOC_INIT")
			binary.LittleEndian.PutUint64(b[0:], 64<<10)
			binary.LittleEndian.PutUint64(b[8:], 64<<10)
			binary.LittleEndian.PutUint32(b[20:], 7)
			return expect("init with reserved bits set", call(fd, "PITRACE_IOC_INIT", b), unix.EINVAL)
		},
		func() error {
			b := arg("PITRACE_IOC_SETMODE")
			binary.LittleEndian.PutUint32(b[0:], 2)
			return expect("cont mode without a stream file", call(fd, "PITRACE_IOC_SETMODE", b), unix.EINVAL)
		},
		func() error {
			b := arg("PITRACE_IOC_SETMODE")
			for i := 8; i < len(b); i++ {
				b[i] = 'x'
			}
			binary.LittleEndian.PutUint32(b[0:], 2)
			return expect("cont mode with an unterminated path", call(fd, "PITRACE_IOC_SETMODE", b), unix.EINVAL)
		},
		func() error {
			b := arg("PITRACE_IOC_SETRATE")
			binary.LittleEndian.PutUint32(b[0:], 0)
			return expect("rate 0", call(fd, "PITRACE_IOC_SETRATE", b), unix.EINVAL)
		},
		func() error {
			b := arg("PITRACE_IOC_SETRATE")
			binary.LittleEndian.PutUint32(b[0:], 100001)
			return expect("rate 100001", call(fd, "PITRACE_IOC_SETRATE", b), unix.EINVAL)
		},
		func() error {
			b := arg("PITRACE_IOC_HOOK")
			binary.LittleEndian.PutUint16(b[0:], 0x100)
			return expect("hook while not on", call(fd, "PITRACE_IOC_HOOK", b), unix.EINVAL)
		},
		func() error {
			b := arg("PITRACE_IOC_HOOK")
			binary.LittleEndian.PutUint16(b[0:], 0x12)
			return expect("hook with a facility major (0x12)", call(fd, "PITRACE_IOC_HOOK", b), unix.EINVAL)
		},
		func() error {
			b := arg("PITRACE_IOC_HOOK")
			binary.LittleEndian.PutUint16(b[0:], 0x100)
			binary.LittleEndian.PutUint32(b[8:], 65)
			return expect("hook with 65 words", call(fd, "PITRACE_IOC_HOOK", b), unix.EINVAL)
		},
		func() error {
			b := arg("PITRACE_IOC_HOOK")
			binary.LittleEndian.PutUint16(b[0:], 0x100)
			binary.LittleEndian.PutUint32(b[8:], 4)
			binary.LittleEndian.PutUint64(b[16:], 8)
			return expect("hook with a bad words pointer", call(fd, "PITRACE_IOC_HOOK", b), unix.EFAULT)
		},
		func() error {
			return expect("jit while not on", call(fd, "PITRACE_IOC_JIT", jitArg(1, 4, 0, 0)), unix.EINVAL)
		},
		func() error {
			return expect("jit with reserved set", call(fd, "PITRACE_IOC_JIT", jitArg(1, 4, 0, 1)), unix.EINVAL)
		},
		func() error {
			return expect("jit with a 481-byte name", call(fd, "PITRACE_IOC_JIT", jitArg(1, 481, 0, 0)), unix.EINVAL)
		},
		func() error {
			return expect("jit minor 4", call(fd, "PITRACE_IOC_JIT", jitArg(4, 4, 0, 0)), unix.EINVAL)
		},
		func() error {
			return expect("jit unload with a name", call(fd, "PITRACE_IOC_JIT", jitArg(2, 4, 0, 0)), unix.EINVAL)
		},
		func() error {
			return expect("jit with a kernel name pointer", call(fd, "PITRACE_IOC_JIT", jitArg(1, 4, 0xffffffff81000000, 0)), unix.EFAULT)
		},
		func() error {
			return expect("method while not on", call(fd, "PITRACE_IOC_METHOD", methodArg(0x30, 0x10, 0, 0)), unix.EINVAL)
		},
		func() error {
			return expect("method with reserved set", call(fd, "PITRACE_IOC_METHOD", methodArg(0x30, 0x10, 1, 0)), unix.EINVAL)
		},
		func() error {
			return expect("method with reserved2 set (a pid?)", call(fd, "PITRACE_IOC_METHOD", methodArg(0x50, 0x10, 0, 1234)), unix.EINVAL)
		},
		func() error {
			return expect("method major 0x40", call(fd, "PITRACE_IOC_METHOD", methodArg(0x40, 0x10, 0, 0)), unix.EINVAL)
		},
		func() error {
			return expect("method minor 0x11", call(fd, "PITRACE_IOC_METHOD", methodArg(0x30, 0x11, 0, 0)), unix.EINVAL)
		},
		func() error {
			return expect("method from a kernel address", rawIoctl(fd, ioc["PITRACE_IOC_METHOD"], 0xffffffff81000000), unix.EFAULT)
		},
		func() error {
			_, err := unix.Mmap(int(fd), 0, 4096, unix.PROT_READ, unix.MAP_SHARED)
			return expect("mmap with no buffers", errnoOf(err), unix.ENODATA)
		},
		func() error {
			b := arg("PITRACE_IOC_INIT")
			binary.LittleEndian.PutUint64(b[0:], 64<<10)
			binary.LittleEndian.PutUint64(b[8:], 64<<10)
			return expect("init 64K + 64K", call(fd, "PITRACE_IOC_INIT", b), 0)
		},
		func() error {
			_, err := unix.Mmap(int(fd), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			return expect("mmap writable", errnoOf(err), unix.EPERM)
		},
		func() error {
			_, err := unix.Mmap(int(fd), 0, 1<<20, unix.PROT_READ, unix.MAP_SHARED)
			return expect("mmap larger than the buffer", errnoOf(err), unix.EINVAL)
		},
		func() error {
			_, err := unix.Mmap(int(fd), 4096, 4096, unix.PROT_READ, unix.MAP_SHARED)
			return expect("mmap at a misaligned offset", errnoOf(err), unix.EINVAL)
		},
		func() error {
			_, err := unix.Mmap(int(fd), 1000<<32, 4096, unix.PROT_READ, unix.MAP_SHARED)
			return expect("mmap of CPU 500", errnoOf(err), unix.EINVAL)
		},
		func() error {
			m, err := unix.Mmap(int(fd), 1<<32, 4096, unix.PROT_READ, unix.MAP_SHARED)
			if err != nil {
				return expect("mmap the MTE buffer of CPU 0", errnoOf(err), 0)
			}
			magic := binary.LittleEndian.Uint32(m[0:])
			kind := binary.LittleEndian.Uint32(m[12:])
			unix.Munmap(m)
			if magic != 0x46424950 || kind != 1 {
				return fmt.Errorf("MTE buffer header: magic %#x kind %d", magic, kind)
			}
			return expect("mmap the MTE buffer of CPU 0 (magic, kind ok)", 0, 0)
		},
		func() error {
			m, err := unix.Mmap(int(fd), 0, 4096, unix.PROT_READ, unix.MAP_SHARED)
			if err != nil {
				return err
			}
			defer unix.Munmap(m)
			return expect("mprotect a mapping writable", errnoOf(unix.Mprotect(m, unix.PROT_READ|unix.PROT_WRITE)), unix.EACCES)
		},
		func() error {
			b := arg("PITRACE_IOC_RELEASE")
			binary.LittleEndian.PutUint32(b[0:], 0)
			binary.LittleEndian.PutUint32(b[8:], 99)
			return expect("release segment 99", call(fd, "PITRACE_IOC_RELEASE", b), unix.EINVAL)
		},
		func() error {
			b := arg("PITRACE_IOC_CPU_STATUS")
			binary.LittleEndian.PutUint32(b[0:], 4096)
			return expect("status of CPU 4096", call(fd, "PITRACE_IOC_CPU_STATUS", b), unix.EINVAL)
		},
		func() error {
			b := arg("PITRACE_IOC_BENCH")
			binary.LittleEndian.PutUint32(b[0:], 1)
			binary.LittleEndian.PutUint32(b[4:], 10)
			return expect("bench while not on", call(fd, "PITRACE_IOC_BENCH", b), unix.EINVAL)
		},
		func() error { return expect("free", call(fd, "PITRACE_IOC_FREE", nil), 0) },
	}
	for _, c := range checks {
		if err := c(); err != nil {
			return err
		}
	}
	// The Go backend's messages for the same mistakes.
	fac, err := control.Open("kmod")
	if err != nil {
		return err
	}
	defer fac.Close()
	if err := fac.SetRate(1000, "cycles"); err == nil {
		fmt.Println("badinput: event-based tprof accepted: this machine has a PMU")
	} else {
		fmt.Printf("badinput: setrate -e cycles -> %v\n", err)
		if !strings.Contains(err.Error(), "no hardware PMU") {
			return fmt.Errorf("setrate -e cycles: want the no-PMU message, got %v", err)
		}
	}
	err = fac.Init(control.Config{TraceBufSize: 1 << 30, MTEBufSize: 1 << 30})
	fmt.Printf("badinput: init -t 1G -m 1G -> %v\n", err)
	if err == nil || !strings.Contains(err.Error(), "not enough memory") {
		return fmt.Errorf("init -t 1G -m 1G: want the not-enough-memory message, got %v", err)
	}
	fmt.Println("badinput: ok")
	return nil
}

func errnoOf(err error) unix.Errno {
	if err == nil {
		return 0
	}
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EIO
}

// fuzz issues n random ioctls: known commands with random or plausible
// arguments and bad pointers, and random command numbers (which must all
// give ENOTTY), plus random mmaps.
func fuzz(n int, seed int64) error {
	f, err := openDev()
	if err != nil {
		return err
	}
	defer f.Close()
	fd := f.Fd()
	r := rand.New(rand.NewSource(seed))
	names := make([]string, 0, len(ioc))
	byNr := map[uintptr]uintptr{}
	for name, v := range ioc {
		byNr[v&0xff] = v
		// One drainer at a time: a fuzzer attached as the drainer would
		// make every wrap/cont off wait for it.
		if name != "PITRACE_IOC_DRAIN" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	// A command is the module's when its number and direction are one of
	// its ioctls and its size is at least the ABI 1 size (a longer struct
	// is a newer caller's): the module answers every other with ENOTTY.
	known := func(req uintptr) bool {
		v, ok := byNr[req&0xff]
		if !ok || req>>8&0xff != 0xE1 || req>>30 != v>>30 {
			return false
		}
		if iocSize(v) == 0 {
			return iocSize(req) == 0
		}
		return iocSize(req) >= iocSize(v)
	}
	counts := map[string]int{}
	// room for the largest size a command number can carry (14 bits):
	// the module reads and writes (zeroes) up to that size
	buf := make([]byte, 1<<14)
	start := time.Now()
	for i := 0; i < n; i++ {
		if r.Intn(64) == 0 {
			off := int64(r.Intn(6)) << 32
			if r.Intn(4) == 0 {
				off = r.Int63()
			}
			m, err := unix.Mmap(int(fd), off, (1+r.Intn(20))*4096, unix.PROT_READ, unix.MAP_SHARED)
			if err == nil {
				_ = m[0] + m[len(m)-1]
				unix.Munmap(m)
				counts["mmap ok"]++
			} else {
				counts["mmap "+errName(errnoOf(err))]++
			}
			continue
		}
		var req uintptr
		if r.Intn(4) == 0 {
			req = uintptr(r.Uint32())
			if r.Intn(2) == 0 {
				req = req&^0xff00 | 0xE100
			}
		} else {
			req = ioc[names[r.Intn(len(names))]]
		}
		size := iocSize(req)
		if size > len(buf) {
			size = len(buf)
		}
		r.Read(buf[:size])
		plausible(r, req, buf)
		var a uintptr
		switch r.Intn(10) {
		case 0:
			a = 0
		case 1:
			a = uintptr(r.Uint64())
		case 2:
			a = 0xffffffff81000000
		default:
			a = uintptr(unsafe.Pointer(&buf[0]))
		}
		e := rawIoctl(fd, req, a)
		if !known(req) && e != unix.ENOTTY {
			return fmt.Errorf("unknown command %#x gave %v, want ENOTTY", req, e)
		}
		if known(req) {
			counts["known "+errName(e)]++
		} else {
			counts["unknown "+errName(e)]++
		}
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, counts[k]))
	}
	fmt.Printf("fuzz seed %d: %d calls in %s: %s\n", seed, n, time.Since(start).Round(time.Millisecond), strings.Join(parts, " "))
	return nil
}

// plausible makes some arguments valid enough to reach the deeper paths,
// with bounds that keep a TCG guest responsive (small buffers, low rates).
func plausible(r *rand.Rand, req uintptr, b []byte) {
	if r.Intn(2) == 0 {
		return
	}
	switch req {
	case ioc["PITRACE_IOC_INIT"]:
		binary.LittleEndian.PutUint64(b[0:], uint64(4096+r.Intn(64<<10)))
		binary.LittleEndian.PutUint64(b[8:], uint64(4096+r.Intn(64<<10)))
		binary.LittleEndian.PutUint32(b[16:], uint32(r.Intn(4)))
		binary.LittleEndian.PutUint32(b[20:], 0)
	case ioc["PITRACE_IOC_JIT"]:
		// minors 0..4, names in and out of bounds, the name in the buffer
		binary.LittleEndian.PutUint32(b[0:], uint32(r.Intn(5)))
		binary.LittleEndian.PutUint32(b[4:], uint32(r.Intn(490)))
		binary.LittleEndian.PutUint64(b[24:], uint64(uintptr(unsafe.Pointer(&b[64]))))
		binary.LittleEndian.PutUint64(b[32:], uint64(r.Intn(8)/7))
	case ioc["PITRACE_IOC_METHOD"]:
		// the two majors and minors with neighbours, reserved mostly 0
		binary.LittleEndian.PutUint16(b[0:], []uint16{0x30, 0x50, 0x31, 0x100}[r.Intn(4)])
		binary.LittleEndian.PutUint16(b[2:], uint16(r.Intn(8)/7))
		binary.LittleEndian.PutUint32(b[4:], []uint32{0x10, 0x80000010, 0x11, 0}[r.Intn(4)])
		binary.LittleEndian.PutUint64(b[16:], uint64(r.Intn(8)/7))
	case ioc["PITRACE_IOC_SETMODE"]:
		binary.LittleEndian.PutUint32(b[0:], uint32(r.Intn(4)))
		binary.LittleEndian.PutUint32(b[4:], 0)
		copy(b[8:], "/tmp/fuzz-stream.nrm2\x00")
	case ioc["PITRACE_IOC_ENABLE"], ioc["PITRACE_IOC_DISABLE"]:
		// call stacks on or off, depth limits in and out of range
		binary.LittleEndian.PutUint64(b[8:], uint64(r.Intn(2)))
		depths := []uint32{0, 1, 127, 128, 0xffffffff, uint32(r.Intn(300))}
		binary.LittleEndian.PutUint32(b[32:], depths[r.Intn(len(depths))])
		binary.LittleEndian.PutUint32(b[36:], uint32(r.Intn(4)/3))
	case ioc["PITRACE_IOC_SETRATE"]:
		binary.LittleEndian.PutUint32(b[0:], uint32(1+r.Intn(2000)))
		if r.Intn(2) == 0 {
			b[16] = 0
		} else {
			b[16+r.Intn(31)] = 0
		}
	case ioc["PITRACE_IOC_CPU_STATUS"]:
		binary.LittleEndian.PutUint32(b[0:], uint32(r.Intn(4)))
	case ioc["PITRACE_IOC_HOOK"]:
		binary.LittleEndian.PutUint16(b[0:], uint16(0x100+r.Intn(10)))
		binary.LittleEndian.PutUint16(b[2:], 0)
		binary.LittleEndian.PutUint32(b[8:], uint32(r.Intn(70)))
		binary.LittleEndian.PutUint32(b[12:], uint32(r.Intn(600)))
		p := uint64(uintptr(unsafe.Pointer(&b[64])))
		binary.LittleEndian.PutUint64(b[16:], p)
		binary.LittleEndian.PutUint64(b[24:], p+256)
	case ioc["PITRACE_IOC_RELEASE"]:
		binary.LittleEndian.PutUint32(b[0:], uint32(r.Intn(3)))
		binary.LittleEndian.PutUint32(b[4:], uint32(r.Intn(3)))
		binary.LittleEndian.PutUint32(b[8:], uint32(r.Intn(18)))
		binary.LittleEndian.PutUint32(b[12:], 0)
		binary.LittleEndian.PutUint64(b[16:], uint64(r.Intn(4)))
	case ioc["PITRACE_IOC_BENCH"]:
		binary.LittleEndian.PutUint32(b[0:], uint32(r.Intn(3)))
		binary.LittleEndian.PutUint32(b[4:], uint32(r.Intn(200)))
	case ioc["PITRACE_IOC_ITRACE_ON"], ioc["PITRACE_IOC_ITRACE_OFF"]:
		// ITrace: this process at its next exec (never: it stays
		// pending until off or its exit), another pid, or a bad one;
		// never the fuzzer itself now (SELF) or --pids-from, which
		// would single-step the fuzzers or the whole guest.
		on := req == ioc["PITRACE_IOC_ITRACE_ON"]
		pids := []int32{int32(os.Getpid()), int32(r.Intn(1 << 16)), -1, 0}
		n := r.Intn(3)
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(b[64+4*i:], uint32(pids[r.Intn(len(pids))]))
		}
		p := uint64(uintptr(unsafe.Pointer(&b[64])))
		if on {
			binary.LittleEndian.PutUint32(b[0:], 4|uint32(r.Intn(2))*2) // AT_EXEC [| FOLLOW]
			binary.LittleEndian.PutUint32(b[4:], uint32(n))
			binary.LittleEndian.PutUint32(b[8:], 0)
			binary.LittleEndian.PutUint64(b[16:], p)
			binary.LittleEndian.PutUint32(b[28:], 0)
		} else {
			binary.LittleEndian.PutUint32(b[0:], uint32(r.Intn(2)))
			binary.LittleEndian.PutUint32(b[4:], uint32(n))
			binary.LittleEndian.PutUint64(b[8:], p)
			binary.LittleEndian.PutUint32(b[20:], 0)
		}
	}
}

// toggle turns tracing on and off and writes the trace, n times, while
// other processes fuzz the device: every step may fail, none may hang.
func toggle(n int, stopFile string) error {
	ok, failed, rounds := 0, 0, 0
	start := time.Now()
	for i := 0; i < n; i++ {
		if stopFile != "" {
			if _, err := os.Stat(stopFile); err == nil {
				break
			}
		}
		rounds++
		f, err := control.Open("kmod")
		if err != nil {
			return err
		}
		steps := []func() error{
			func() error { return f.SetMode(control.ModeNormal, "") },
			func() error { return f.Init(control.Config{TraceBufSize: 32 << 10, MTEBufSize: 32 << 10}) },
			f.On,
			func() error { time.Sleep(time.Duration(i%5) * time.Millisecond); return nil },
			f.Off,
			func() error { return f.Get("/tmp/toggle.nrm2") },
		}
		for _, s := range steps {
			if err := s(); err != nil {
				failed++
			} else {
				ok++
			}
		}
		f.Close()
	}
	fmt.Printf("toggle: %d rounds in %s: %d steps ok, %d refused under concurrent fuzzing\n", rounds, time.Since(start).Round(time.Millisecond), ok, failed)
	if ok == 0 {
		return fmt.Errorf("no step succeeded")
	}
	return nil
}

// holdMap maps every buffer and waits to be killed.
func holdMap() error {
	f, err := openDev()
	if err != nil {
		return err
	}
	b := arg("PITRACE_IOC_STATUS")
	if e := call(f.Fd(), "PITRACE_IOC_STATUS", b); e != 0 {
		return e
	}
	ncpu := int(binary.LittleEndian.Uint32(b[48:]))
	var maps [][]byte
	for cpu := 0; cpu < ncpu; cpu++ {
		for kind := 0; kind < 2; kind++ {
			m, err := unix.Mmap(int(f.Fd()), int64(cpu*2+kind)<<32, 4096, unix.PROT_READ, unix.MAP_SHARED)
			if err != nil {
				return fmt.Errorf("map cpu %d kind %d: %w", cpu, kind, err)
			}
			maps = append(maps, m)
		}
	}
	fmt.Printf("holdmap: %d buffers mapped, pid %d, waiting to be killed\n", len(maps), os.Getpid())
	for {
		time.Sleep(time.Hour)
	}
}

// jitArg is a struct pitrace_jit_arg (kmod/uapi/pitrace.h) naming n bytes
// at name (0: a name in a static buffer), with reserved set as given.
func jitArg(minor, n uint32, name uint64, reserved uint64) []byte {
	b := arg("PITRACE_IOC_JIT")
	binary.LittleEndian.PutUint32(b[0:], minor)
	binary.LittleEndian.PutUint32(b[4:], n)
	binary.LittleEndian.PutUint64(b[8:], 0x1000)
	binary.LittleEndian.PutUint64(b[16:], 16)
	if name == 0 {
		name = uint64(uintptr(unsafe.Pointer(&jitName[0])))
	}
	binary.LittleEndian.PutUint64(b[24:], name)
	binary.LittleEndian.PutUint64(b[32:], reserved)
	return b
}

var jitName [512]byte

// methodArg is a struct pitrace_method_arg (kmod/uapi/pitrace.h).
func methodArg(major uint16, minor uint32, reserved uint16, reserved2 uint64) []byte {
	b := arg("PITRACE_IOC_METHOD")
	binary.LittleEndian.PutUint16(b[0:], major)
	binary.LittleEndian.PutUint16(b[2:], reserved)
	binary.LittleEndian.PutUint32(b[4:], minor)
	binary.LittleEndian.PutUint64(b[8:], 42)
	binary.LittleEndian.PutUint64(b[16:], reserved2)
	return b
}
