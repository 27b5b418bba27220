// Package msr reads and writes x86 model-specific registers on one CPU, for
// the msr tool and the VM test:
//
//	a, err := msr.Open("")          // "kmod" (/dev/pitrace), "devmsr" (/dev/cpu/N/msr), "" = the first that works
//	v, err := a.Read(cpu, msr.IA32_TSC)
//	err = a.Write(cpu, 0xc0000103, v)
//	reg, err := msr.ParseReg("IA32_TSC") // or "0x10", "16"
//
// With the pitrace module the ioctls PITRACE_IOC_MSR_READ/_WRITE run
// rdmsr_safe_on_cpu/wrmsr_safe_on_cpu; without it /dev/cpu/N/msr (msr.ko)
// is used. Errors say what to do: load a module, run as root, load the
// module with allow_writes=1, or that the register does not exist.
package msr

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/kmodbackend"
)

// Reg is a named register.
type Reg struct {
	Name string
	Addr uint32
	Help string
}

// Common registers: Intel SDM vol. 4 "Model-Specific Registers" and AMD APM
// vol. 2 names (architectural ones are IA32_*).
const (
	IA32_TSC     = 0x10
	IA32_TSC_AUX = 0xc0000103
)

var regs = []Reg{
	{"IA32_TSC", 0x10, "time stamp counter"},
	{"IA32_PLATFORM_ID", 0x17, "platform id (Intel)"},
	{"IA32_APIC_BASE", 0x1b, "local APIC base and enable"},
	{"IA32_FEATURE_CONTROL", 0x3a, "VMX / SGX lock and enables (Intel)"},
	{"IA32_TSC_ADJUST", 0x3b, "TSC adjustment"},
	{"IA32_SPEC_CTRL", 0x48, "speculation control"},
	{"IA32_BIOS_SIGN_ID", 0x8b, "microcode revision (high 32 bits)"},
	{"IA32_PMC0", 0xc1, "general-purpose performance counter 0"},
	{"IA32_PMC1", 0xc2, "general-purpose performance counter 1"},
	{"IA32_PMC2", 0xc3, "general-purpose performance counter 2"},
	{"IA32_PMC3", 0xc4, "general-purpose performance counter 3"},
	{"IA32_MPERF", 0xe7, "maximum-frequency clock count"},
	{"IA32_APERF", 0xe8, "actual-frequency clock count"},
	{"IA32_MTRRCAP", 0xfe, "MTRR capabilities"},
	{"IA32_ARCH_CAPABILITIES", 0x10a, "speculation-related capabilities"},
	{"IA32_SYSENTER_CS", 0x174, "SYSENTER code segment"},
	{"IA32_SYSENTER_ESP", 0x175, "SYSENTER stack pointer"},
	{"IA32_SYSENTER_EIP", 0x176, "SYSENTER entry point"},
	{"IA32_MCG_CAP", 0x179, "machine-check capabilities"},
	{"IA32_MCG_STATUS", 0x17a, "machine-check status"},
	{"IA32_PERFEVTSEL0", 0x186, "event select for IA32_PMC0"},
	{"IA32_PERFEVTSEL1", 0x187, "event select for IA32_PMC1"},
	{"IA32_PERFEVTSEL2", 0x188, "event select for IA32_PMC2"},
	{"IA32_PERFEVTSEL3", 0x189, "event select for IA32_PMC3"},
	{"IA32_PERF_STATUS", 0x198, "current performance state"},
	{"IA32_PERF_CTL", 0x199, "requested performance state"},
	{"IA32_THERM_STATUS", 0x19c, "thermal status"},
	{"IA32_MISC_ENABLE", 0x1a0, "miscellaneous enables"},
	{"IA32_ENERGY_PERF_BIAS", 0x1b0, "energy / performance preference"},
	{"IA32_PACKAGE_THERM_STATUS", 0x1b1, "package thermal status"},
	{"IA32_DEBUGCTL", 0x1d9, "debug control (LBR, BTF)"},
	{"IA32_PAT", 0x277, "page attribute table"},
	{"IA32_FIXED_CTR0", 0x309, "fixed counter 0: instructions retired"},
	{"IA32_FIXED_CTR1", 0x30a, "fixed counter 1: core cycles"},
	{"IA32_FIXED_CTR2", 0x30b, "fixed counter 2: reference cycles"},
	{"IA32_PERF_CAPABILITIES", 0x345, "performance-monitoring capabilities"},
	{"IA32_FIXED_CTR_CTRL", 0x38d, "fixed counter control"},
	{"IA32_PERF_GLOBAL_STATUS", 0x38e, "counter overflow status"},
	{"IA32_PERF_GLOBAL_CTRL", 0x38f, "counter global enable"},
	{"IA32_PERF_GLOBAL_OVF_CTRL", 0x390, "counter overflow clear"},
	{"IA32_PEBS_ENABLE", 0x3f1, "PEBS enable"},
	{"MSR_RAPL_POWER_UNIT", 0x606, "RAPL units (Intel)"},
	{"MSR_PKG_ENERGY_STATUS", 0x611, "package energy counter (Intel)"},
	{"IA32_TSC_DEADLINE", 0x6e0, "TSC deadline timer"},
	{"IA32_EFER", 0xc0000080, "extended feature enables"},
	{"IA32_STAR", 0xc0000081, "SYSCALL segments"},
	{"IA32_LSTAR", 0xc0000082, "SYSCALL entry point (64-bit)"},
	{"IA32_FMASK", 0xc0000084, "SYSCALL flag mask"},
	{"IA32_FS_BASE", 0xc0000100, "FS base"},
	{"IA32_GS_BASE", 0xc0000101, "GS base"},
	{"IA32_KERNEL_GS_BASE", 0xc0000102, "SWAPGS GS base"},
	{"IA32_TSC_AUX", 0xc0000103, "TSC_AUX (RDTSCP/RDPID; Linux keeps the CPU number here)"},
	{"AMD_PERF_CTL0", 0xc0010000, "AMD performance event select 0"},
	{"AMD_PERF_CTL1", 0xc0010001, "AMD performance event select 1"},
	{"AMD_PERF_CTL2", 0xc0010002, "AMD performance event select 2"},
	{"AMD_PERF_CTL3", 0xc0010003, "AMD performance event select 3"},
	{"AMD_PERF_CTR0", 0xc0010004, "AMD performance counter 0"},
	{"AMD_PERF_CTR1", 0xc0010005, "AMD performance counter 1"},
	{"AMD_PERF_CTR2", 0xc0010006, "AMD performance counter 2"},
	{"AMD_PERF_CTR3", 0xc0010007, "AMD performance counter 3"},
	{"AMD_HWCR", 0xc0010015, "AMD hardware configuration"},
}

// Regs lists the named registers in address order.
func Regs() []Reg {
	out := make([]Reg, len(regs))
	copy(out, regs)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

// NameOf names a register address ("" if it has no name here).
func NameOf(addr uint32) string {
	for _, r := range regs {
		if r.Addr == addr {
			return r.Name
		}
	}
	return ""
}

// ParseReg accepts a register name (case-insensitive, IA32_ prefix
// optional), a hex number (0x10) or a decimal one.
func ParseReg(s string) (uint32, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("no register given: use a name (msr -l lists them) or a number such as 0x10")
	}
	if c := t[0]; c >= '0' && c <= '9' {
		v, err := strconv.ParseUint(t, 0, 32)
		if err != nil {
			return 0, fmt.Errorf("register %q: not a 32-bit number (0x10 or 16): %w", s, err)
		}
		return uint32(v), nil
	}
	u := strings.ToUpper(t)
	for _, r := range regs {
		if r.Name == u || r.Name == "IA32_"+u {
			return r.Addr, nil
		}
	}
	return 0, fmt.Errorf("unknown register %q: use a name of `msr -l` or a number such as 0x10", s)
}

// ParseValue parses a value to write: hex (0x..), octal (0..) or decimal.
func ParseValue(s string) (uint64, error) {
	v, err := strconv.ParseUint(strings.TrimSpace(s), 0, 64)
	if err != nil {
		return 0, fmt.Errorf("value %q: not a 64-bit number (0x... or decimal): %w", s, err)
	}
	return v, nil
}

// Access reads and writes MSRs.
type Access interface {
	Backend() string // "kmod" or "devmsr"
	Read(cpu int, reg uint32) (uint64, error)
	Write(cpu int, reg uint32, v uint64) error
	Close() error
}

// ErrNoAccess: neither the pitrace module nor msr.ko is there.
var ErrNoAccess = errors.New("no MSR access on this machine: load the pitrace module (insmod kmod/pitrace.ko) or msr.ko (modprobe msr; then /dev/cpu/N/msr exists)")

// Paths are the device nodes Open tries; tests move them.
var (
	ModuleDevice = kmodbackend.Device
	DevMSR       = "/dev/cpu/%d/msr"
)

// Open opens MSR access through backend "kmod", "devmsr" or "" (the module
// when /dev/pitrace exists, else /dev/cpu/N/msr).
func Open(backend string) (Access, error) {
	switch backend {
	case "", "auto":
		if _, err := os.Stat(ModuleDevice); err == nil {
			return openKmod()
		}
		if _, err := os.Stat(fmt.Sprintf(DevMSR, 0)); err == nil {
			return &devmsr{}, nil
		}
		return nil, ErrNoAccess
	case "kmod":
		return openKmod()
	case "devmsr":
		if _, err := os.Stat(fmt.Sprintf(DevMSR, 0)); err != nil {
			return nil, fmt.Errorf("%s does not exist: load msr.ko (modprobe msr): %w", fmt.Sprintf(DevMSR, 0), err)
		}
		return &devmsr{}, nil
	}
	return nil, fmt.Errorf("unknown MSR backend %q: use kmod, devmsr or auto", backend)
}

func openKmod() (Access, error) {
	f, err := os.OpenFile(ModuleDevice, os.O_RDWR, 0)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("%s does not exist: load the pitrace module (insmod kmod/pitrace.ko): %w", ModuleDevice, err)
		}
		if os.IsPermission(err) {
			return nil, fmt.Errorf("open %s: MSR access needs root: %w", ModuleDevice, err)
		}
		return nil, fmt.Errorf("open %s: %w", ModuleDevice, err)
	}
	return &kmod{f: f}, nil
}

// explain words an errno of either backend.
func explain(op string, cpu int, reg uint32, err error) error {
	name := fmt.Sprintf("%#x", reg)
	if n := NameOf(reg); n != "" {
		name += " (" + n + ")"
	}
	switch {
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("%s MSR %s on CPU %d: permission denied: MSR access needs root (CAP_SYS_RAWIO): %w", op, name, cpu, err)
	case errors.Is(err, unix.EACCES) && op == "write":
		return fmt.Errorf("write MSR %s on CPU %d: not in the pitrace module's write allowlist (docs/hwevents.md); to write any MSR, load the module with allow_writes=1 (or, as root, echo 1 > /sys/module/pitrace/parameters/allow_writes): %w", name, cpu, err)
	case errors.Is(err, unix.EACCES):
		return fmt.Errorf("%s MSR %s on CPU %d: permission denied: MSR access needs root: %w", op, name, cpu, err)
	case errors.Is(err, unix.EIO):
		return fmt.Errorf("%s MSR %s on CPU %d: the register does not exist on this CPU or refuses the value (the instruction faulted): %w", op, name, cpu, err)
	case errors.Is(err, unix.ENOTTY):
		return fmt.Errorf("%s MSR %s: the loaded pitrace module has no MSR ioctls (an older build): rebuild and reload kmod/pitrace.ko, or use --backend devmsr (modprobe msr): %w", op, name, err)
	case errors.Is(err, unix.ENXIO) || errors.Is(err, unix.ENOENT):
		return fmt.Errorf("%s MSR %s: CPU %d is offline or does not exist: %w", op, name, cpu, err)
	}
	return fmt.Errorf("%s MSR %s on CPU %d: %w", op, name, cpu, err)
}

type kmod struct{ f *os.File }

func (k *kmod) Backend() string { return "kmod" }
func (k *kmod) Close() error    { return k.f.Close() }

func (k *kmod) Read(cpu int, reg uint32) (uint64, error) {
	if cpu < 0 {
		return 0, fmt.Errorf("CPU %d: CPUs are numbered from 0", cpu)
	}
	v, err := kmodbackend.MSR(int(k.f.Fd()), false, uint32(cpu), reg, 0)
	if err != nil {
		return 0, explain("read", cpu, reg, err)
	}
	return v, nil
}

func (k *kmod) Write(cpu int, reg uint32, v uint64) error {
	if cpu < 0 {
		return fmt.Errorf("CPU %d: CPUs are numbered from 0", cpu)
	}
	if _, err := kmodbackend.MSR(int(k.f.Fd()), true, uint32(cpu), reg, v); err != nil {
		return explain("write", cpu, reg, err)
	}
	return nil
}

// devmsr uses msr.ko's /dev/cpu/N/msr (pread/pwrite at offset reg).
type devmsr struct{}

func (d *devmsr) Backend() string { return "devmsr" }
func (d *devmsr) Close() error    { return nil }

func (d *devmsr) open(cpu int, flag int) (*os.File, error) {
	f, err := os.OpenFile(fmt.Sprintf(DevMSR, cpu), flag, 0)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return nil, pe.Err
		}
		return nil, err
	}
	return f, nil
}

func (d *devmsr) Read(cpu int, reg uint32) (uint64, error) {
	f, err := d.open(cpu, os.O_RDONLY)
	if err != nil {
		return 0, explain("read", cpu, reg, err)
	}
	defer f.Close()
	var b [8]byte
	if _, err := unix.Pread(int(f.Fd()), b[:], int64(reg)); err != nil {
		return 0, explain("read", cpu, reg, err)
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

func (d *devmsr) Write(cpu int, reg uint32, v uint64) error {
	f, err := d.open(cpu, os.O_WRONLY)
	if err != nil {
		return explain("write", cpu, reg, err)
	}
	defer f.Close()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	if _, err := unix.Pwrite(int(f.Fd()), b[:], int64(reg)); err != nil {
		return explain("write", cpu, reg, err)
	}
	return nil
}
