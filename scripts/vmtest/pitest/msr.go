package main

// pitest msr: the module's MSR ioctls through the msr tool's own code
// (tools/msr/msrcli, run in-process) and libperfutil/msr.
//
//   - msr -r IA32_TSC -a, three rounds: every CPU's value lies between
//     rdtsc read before and after the command (the vCPUs share one TSC),
//     and rises from round to round; a read pinned to each CPU lies
//     between rdtsc read beside it;
//   - msr -w IA32_TSC_AUX V reads back V on every CPU and is restored;
//   - a write outside the allowlist (IA32_TSC) is refused (EACCES) and
//     changes nothing;
//   - a register that does not exist, an offline CPU: errors, no Oops;
//   - as a non-root user (with /dev/pitrace opened up to 0666 for the
//     test) reads and writes are refused (EPERM).
//
// `pitest msr nonroot` is the non-root half, run by the root half.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/events"
	"perfinsp/libperfutil/msr"
	"perfinsp/tools/msr/msrcli"
)

func msrTool(args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	rc := msrcli.Run(append([]string{"msr"}, args...), &out, &errb)
	return out.String(), errb.String(), rc
}

var msrLine = regexp.MustCompile(`cpu (\d+): \S+ \(0x[0-9a-f]+\) = 0x([0-9a-f]{16})`)

func parseMsrOut(out string) (map[int]uint64, error) {
	vals := map[int]uint64{}
	for _, m := range msrLine.FindAllStringSubmatch(out, -1) {
		cpu, _ := strconv.Atoi(m[1])
		v, err := strconv.ParseUint(m[2], 16, 64)
		if err != nil {
			return nil, err
		}
		vals[cpu] = v
	}
	return vals, nil
}

func msrTest(args []string) error {
	if len(args) > 0 && args[0] == "nonroot" {
		return msrNonRoot()
	}
	cpus, err := events.OnlineCPUs()
	if err != nil {
		return err
	}
	fmt.Printf("msr: online CPUs %v\n", cpus)

	a, err := msr.Open("kmod")
	if err != nil {
		return err
	}
	defer a.Close()

	// 0. The cross-CPU call reaches the CPU asked for: Linux keeps each
	// CPU's number in its TSC_AUX (node << 12 | cpu, for RDTSCP/getcpu).
	for _, c := range cpus {
		v, err := a.Read(c, msr.IA32_TSC_AUX)
		if err != nil {
			return err
		}
		if int(v&0xfff) != c {
			return fmt.Errorf("IA32_TSC_AUX read on CPU %d is %#x: not that CPU's number", c, v)
		}
	}
	fmt.Printf("msr: IA32_TSC_AUX of each CPU holds its number: the read ran on the CPU asked for\n")

	// 1. IA32_TSC on every CPU against rdtsc.
	if zero, err := allZero(a, cpus, msr.IA32_TSC); err != nil {
		return err
	} else if zero {
		// QEMU 7.2's TCG helper_rdmsr has no IA32_TSC case (it returns 0
		// for every MSR it does not know): nothing to compare here.
		fmt.Printf("msr: SKIP: IA32_TSC reads 0 on every CPU: this emulator does not implement rdmsr of IA32_TSC " +
			"(QEMU TCG); on hardware or KVM check with: msr -r IA32_TSC -a (values rise and match rdtsc)\n")
	} else if err := msrTSC(a, cpus); err != nil {
		return err
	}

	// 2. IA32_TSC_AUX: write, read back, restore.
	for _, c := range cpus {
		cs := strconv.Itoa(c)
		orig, err := a.Read(c, msr.IA32_TSC_AUX)
		if err != nil {
			return err
		}
		val := orig ^ 0x5a5
		if out, errs, rc := msrTool("-w", "IA32_TSC_AUX", fmt.Sprintf("%#x", val), "-c", cs); rc != 0 {
			return fmt.Errorf("msr -w IA32_TSC_AUX on CPU %d: exit %d: %s%s", c, rc, out, errs)
		}
		out, errs, rc := msrTool("-r", "IA32_TSC_AUX", "-c", cs)
		got, _ := parseMsrOut(out)
		if rc != 0 || got[c] != val {
			return fmt.Errorf("CPU %d: IA32_TSC_AUX reads %#x after writing %#x (exit %d: %s)", c, got[c], val, rc, errs)
		}
		if _, errs, rc := msrTool("-w", "IA32_TSC_AUX", fmt.Sprintf("%#x", orig), "-c", cs); rc != 0 {
			return fmt.Errorf("restore IA32_TSC_AUX on CPU %d: %s", c, errs)
		}
		if v, err := a.Read(c, msr.IA32_TSC_AUX); err != nil || v != orig {
			return fmt.Errorf("CPU %d: IA32_TSC_AUX %#x after restoring %#x (%v)", c, v, orig, err)
		}
		fmt.Printf("msr: CPU %d: IA32_TSC_AUX %#x -> wrote %#x, read it back, restored %#x\n", c, orig, val, orig)
	}

	// 3. A write outside the allowlist is refused and changes nothing.
	t0, err := a.Read(0, msr.IA32_TSC)
	if err != nil {
		return err
	}
	_, errs, rc := msrTool("-w", "IA32_TSC", "1", "-c", "0")
	if rc == 0 || !bytes.Contains([]byte(errs), []byte("allowlist")) {
		return fmt.Errorf("msr -w IA32_TSC 1: exit %d %q: want a refusal naming the allowlist", rc, errs)
	}
	if err := a.Write(0, msr.IA32_TSC, 1); !errors.Is(err, unix.EACCES) {
		return fmt.Errorf("write IA32_TSC: %v, want EACCES", err)
	}
	if t1, err := a.Read(0, msr.IA32_TSC); err != nil || (t0 != 0 && t1 < t0) {
		return fmt.Errorf("IA32_TSC went from %d to %d after the refused writes (%v)", t0, t1, err)
	}
	fmt.Printf("msr: write outside the allowlist refused: %s", errs)

	// 4. A register that does not exist; an offline CPU.
	for _, reg := range []uint32{0x12345678, 0xdeadbeef} {
		_, errs, rc := msrTool("-r", fmt.Sprintf("%#x", reg))
		v, err := a.Read(0, reg)
		if err == nil && rc == 0 && v == 0 {
			// QEMU TCG returns 0 for unknown MSRs instead of raising #GP.
			fmt.Printf("msr: SKIP: rdmsr %#x returns 0 without a fault: this emulator does not fault on unknown MSRs (QEMU TCG); "+
				"on hardware check with: msr -r %#x (must fail: the register does not exist)\n", reg, reg)
			continue
		}
		if rc == 0 || !errors.Is(err, unix.EIO) {
			return fmt.Errorf("read of MSR %#x: exit %d %q, %v: want EIO", reg, rc, errs, err)
		}
		fmt.Printf("msr: non-existent MSR: %s", errs)
	}
	// A write that faults: IA32_PKRS (0x6e1) with reserved bits set raises
	// #GP (in QEMU TCG too). It is outside the allowlist: allow_writes=1
	// for the duration.
	const pkrs = 0x6e1
	if err := a.Write(0, pkrs, 1<<40); !errors.Is(err, unix.EACCES) {
		return fmt.Errorf("write IA32_PKRS with allow_writes=0: %v, want EACCES", err)
	}
	const param = "/sys/module/pitrace/parameters/allow_writes"
	if err := os.WriteFile(param, []byte("1"), 0); err != nil {
		return fmt.Errorf("set %s: %w", param, err)
	}
	_, errs, rc = msrTool("-w", "0x6e1", "0x10000000000")
	werr := a.Write(0, pkrs, 1<<40)
	if err := os.WriteFile(param, []byte("0"), 0); err != nil {
		return fmt.Errorf("reset %s: %w", param, err)
	}
	if rc == 0 || !errors.Is(werr, unix.EIO) || !bytes.Contains([]byte(errs), []byte("faulted")) {
		return fmt.Errorf("faulting write of IA32_PKRS with allow_writes=1: exit %d %q, %v: want EIO", rc, errs, werr)
	}
	fmt.Printf("msr: faulting write (IA32_PKRS reserved bits, allow_writes=1): %s", errs)
	if _, err := a.Read(len(cpus)+1000, msr.IA32_TSC); !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("read on CPU %d: %v, want ENXIO", len(cpus)+1000, err)
	}

	// 5. Non-root: refused even when the device node lets the user open it.
	st, err := os.Stat(msr.ModuleDevice)
	if err != nil {
		return err
	}
	if err := os.Chmod(msr.ModuleDevice, 0o666); err != nil {
		return err
	}
	defer os.Chmod(msr.ModuleDevice, st.Mode().Perm())
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, "msr", "nonroot")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	fmt.Printf("%s", out)
	if err != nil {
		return fmt.Errorf("non-root check: %v", err)
	}
	fmt.Println("msr: PASS")
	return nil
}

// msrNonRoot runs as uid 65534: every MSR request must fail with EPERM.
func msrNonRoot() error {
	if os.Geteuid() == 0 {
		return errors.New("msr nonroot: running as root")
	}
	_, errs, rc := msrTool("-r", "IA32_TSC", "--backend", "kmod")
	if rc == 0 || !bytes.Contains([]byte(errs), []byte("needs root")) {
		return fmt.Errorf("non-root msr -r IA32_TSC: exit %d %q: want a refusal saying root is needed", rc, errs)
	}
	a, err := msr.Open("kmod")
	if err != nil {
		return fmt.Errorf("non-root open of the 0666 device: %w", err)
	}
	defer a.Close()
	if _, err := a.Read(0, msr.IA32_TSC); !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("non-root read: %v, want EPERM", err)
	}
	if err := a.Write(0, msr.IA32_TSC_AUX, 0); !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("non-root write: %v, want EPERM", err)
	}
	fmt.Printf("msr: uid %d refused: %s", os.Geteuid(), errs)
	return nil
}

// allZero reports whether reg reads 0 on every CPU.
func allZero(a msr.Access, cpus []int, reg uint32) (bool, error) {
	for _, c := range cpus {
		v, err := a.Read(c, reg)
		if err != nil {
			return false, err
		}
		if v != 0 {
			return false, nil
		}
	}
	return true, nil
}

// msrTSC: msr -r IA32_TSC -a, three rounds, each value between rdtsc read
// before and after and above the previous round's; then a read pinned to
// each CPU between rdtsc read beside it.
func msrTSC(a msr.Access, cpus []int) error {
	prev := map[int]uint64{}
	for round := 0; round < 3; round++ {
		before := rdtsc()
		out, errs, rc := msrTool("-r", "IA32_TSC", "-a")
		after := rdtsc()
		if rc != 0 {
			return fmt.Errorf("msr -r IA32_TSC -a: exit %d: %s", rc, errs)
		}
		vals, err := parseMsrOut(out)
		if err != nil || len(vals) != len(cpus) {
			return fmt.Errorf("msr -r IA32_TSC -a printed %d CPUs (want %d): %q %v", len(vals), len(cpus), out, err)
		}
		for _, c := range cpus {
			v := vals[c]
			if v < before || v > after {
				return fmt.Errorf("round %d: CPU %d IA32_TSC %d outside rdtsc [%d, %d]", round, c, v, before, after)
			}
			if round > 0 && v <= prev[c] {
				return fmt.Errorf("round %d: CPU %d IA32_TSC %d not above the previous %d", round, c, v, prev[c])
			}
			prev[c] = v
		}
		fmt.Printf("msr: round %d: msr -r IA32_TSC -a within rdtsc window of %d ticks: %v\n", round, after-before, vals)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, c := range cpus {
		var set unix.CPUSet
		set.Set(c)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			return fmt.Errorf("pin to CPU %d: %w", c, err)
		}
		t0 := rdtsc()
		v, err := a.Read(c, msr.IA32_TSC)
		t1 := rdtsc()
		if err != nil {
			return err
		}
		if v < t0 || v > t1 {
			return fmt.Errorf("CPU %d: IA32_TSC %d outside the rdtsc read beside it [%d, %d]", c, v, t0, t1)
		}
		fmt.Printf("msr: CPU %d: rdtsc %d, IA32_TSC +%d, rdtsc +%d (ticks)\n", c, t0, v-t0, t1-t0)
	}
	var all unix.CPUSet
	for _, c := range cpus {
		all.Set(c)
	}
	_ = unix.SchedSetaffinity(0, &all)
	return nil
}
