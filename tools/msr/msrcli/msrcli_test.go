package msrcli

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"perfinsp/libperfutil/msr"
)

func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	rc := Run(append([]string{"msr"}, args...), &out, &errb)
	return out.String(), errb.String(), rc
}

// fakeDevMSR points the devmsr backend at regular files that stand in for
// /dev/cpu/N/msr (the same pread/pwrite at offset = register).
func fakeDevMSR(t *testing.T, cpus int) string {
	dir := t.TempDir()
	for c := 0; c < cpus; c++ {
		if err := os.MkdirAll(filepath.Join(dir, "cpu", string(rune('0'+c))), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(filepath.Join(dir, "cpu", string(rune('0'+c)), "msr"))
		if err != nil {
			t.Fatal(err)
		}
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], 0x1000+uint64(c))
		if _, err := f.WriteAt(b[:], 0x10); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	oldDev, oldMod := msr.DevMSR, msr.ModuleDevice
	msr.DevMSR = filepath.Join(dir, "cpu", "%d", "msr")
	msr.ModuleDevice = filepath.Join(dir, "no-pitrace")
	t.Cleanup(func() { msr.DevMSR, msr.ModuleDevice = oldDev, oldMod })
	return dir
}

func TestList(t *testing.T) {
	out, _, rc := run(t, "-l")
	if rc != 0 || !strings.Contains(out, "IA32_TSC ") || !strings.Contains(out, "0xc0000103") {
		t.Errorf("msr -l (rc %d):\n%s", rc, out)
	}
}

func TestReadWriteThroughDevMSR(t *testing.T) {
	fakeDevMSR(t, 1)
	out, errs, rc := run(t, "-r", "IA32_TSC")
	if rc != 0 || !strings.Contains(out, "cpu 0: IA32_TSC (0x10) = 0x0000000000001000") {
		t.Fatalf("msr -r IA32_TSC: rc %d out %q err %q", rc, out, errs)
	}
	// write after the value, flags after it too
	out, errs, rc = run(t, "-w", "tsc_aux", "0x2a", "-c", "0")
	if rc != 0 || !strings.Contains(out, "IA32_TSC_AUX (0xc0000103) <- 0x000000000000002a") {
		t.Fatalf("msr -w tsc_aux 0x2a: rc %d out %q err %q", rc, out, errs)
	}
	out, _, rc = run(t, "-d", "-r", "0xc0000103")
	if rc != 0 || !strings.Contains(out, "= 0x000000000000002a (42)") {
		t.Errorf("read back: rc %d %q", rc, out)
	}
}

func TestErrors(t *testing.T) {
	fakeDevMSR(t, 1)
	cases := []struct {
		args []string
		rc   int
		want string
	}{
		{nil, 2, "give one of -r REG or -w REG VALUE"},
		{[]string{"-r", "bogus"}, 2, `unknown register "bogus"`},
		{[]string{"-r", "0x1ffffffff"}, 2, "not a 32-bit number"},
		{[]string{"-w", "IA32_TSC_AUX"}, 2, "the value is missing"},
		{[]string{"-w", "IA32_TSC_AUX", "zz"}, 2, `value "zz"`},
		{[]string{"-w", "IA32_TSC_AUX", "1", "-c"}, 2, "-c needs a CPU number"},
		{[]string{"-r", "IA32_TSC", "-c", "7"}, 1, "CPU 7 is offline or does not exist"},
		{[]string{"-r", "IA32_TSC", "--backend", "kmod"}, 1, "load the pitrace module"},
		{[]string{"-r", "IA32_TSC", "--backend", "nope"}, 1, `unknown MSR backend "nope"`},
	}
	for _, c := range cases {
		_, errs, rc := run(t, c.args...)
		if rc != c.rc || !strings.Contains(errs, c.want) || !strings.HasPrefix(errs, "msr: ") {
			t.Errorf("msr %q: rc %d stderr %q; want rc %d and %q", c.args, rc, errs, c.rc, c.want)
		}
	}
}

func TestNoAccessMessage(t *testing.T) {
	old1, old2 := msr.DevMSR, msr.ModuleDevice
	msr.DevMSR, msr.ModuleDevice = "/nonexistent/cpu/%d/msr", "/nonexistent/pitrace"
	defer func() { msr.DevMSR, msr.ModuleDevice = old1, old2 }()
	_, errs, rc := run(t, "-r", "IA32_TSC")
	if rc != 1 || !strings.Contains(errs, "no MSR access on this machine") || !strings.Contains(errs, "modprobe msr") {
		t.Errorf("no access: rc %d %q", rc, errs)
	}
}

// -a with -c, on either side of a write's value, is refused: a write
// meant for one CPU is not done on every one; a negative CPU is no CPU.
// Nothing is read or written.
func TestCPUOptionsConflict(t *testing.T) {
	dir := fakeDevMSR(t, 2)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-w", "IA32_TSC", "5", "-a", "-c", "1"}, "msr: give -c CPU or -a (every CPU), not both (msr --help for more)\n"},
		{[]string{"-a", "-c", "1", "-w", "IA32_TSC", "5"}, "msr: give -c CPU or -a (every CPU), not both (msr --help for more)\n"},
		{[]string{"-r", "IA32_TSC", "-c", "-1"}, "msr: -c -1: not a CPU number (msr --help for more)\n"},
	} {
		out, errs, rc := run(t, c.args...)
		if rc != 2 || errs != c.want || out != "" {
			t.Errorf("msr %q: rc %d, out %q, err %q; want 2 and %q", c.args, rc, out, errs, c.want)
		}
	}
	for cpu := 0; cpu < 2; cpu++ {
		b, err := os.ReadFile(filepath.Join(dir, "cpu", string(rune('0'+cpu)), "msr"))
		if err != nil || len(b) < 0x18 || binary.LittleEndian.Uint64(b[0x10:]) != 0x1000+uint64(cpu) {
			t.Errorf("CPU %d's IA32_TSC was written: %v", cpu, err)
		}
	}
}
