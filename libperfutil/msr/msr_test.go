package msr

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseReg(t *testing.T) {
	for in, want := range map[string]uint32{"IA32_TSC": 0x10, "tsc": 0x10, "ia32_tsc_aux": 0xc0000103, "0x10": 0x10, "16": 16, "0xc0000103": 0xc0000103} {
		if got, err := ParseReg(in); err != nil || got != want {
			t.Errorf("ParseReg(%q) = %#x, %v; want %#x", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "bogus", "0x100000000", "-1", "0xzz"} {
		if _, err := ParseReg(bad); err == nil {
			t.Errorf("ParseReg(%q) accepted", bad)
		}
	}
	if NameOf(0x10) != "IA32_TSC" || NameOf(0x12345678) != "" {
		t.Error("NameOf")
	}
}

// Each errno of either backend becomes a message that says what to do.
func TestExplain(t *testing.T) {
	for errno, want := range map[unix.Errno]string{
		unix.EPERM:  "needs root",
		unix.EIO:    "does not exist on this CPU",
		unix.ENXIO:  "CPU 3 is offline",
		unix.ENOTTY: "rebuild and reload kmod/pitrace.ko",
	} {
		if msg := explain("read", 3, 0x10, errno).Error(); !strings.Contains(msg, want) || !strings.Contains(msg, "0x10 (IA32_TSC)") {
			t.Errorf("%v: %q lacks %q", errno, msg, want)
		}
	}
	if msg := explain("write", 0, 0x10, unix.EACCES).Error(); !strings.Contains(msg, "allow_writes=1") {
		t.Errorf("EACCES on write: %q", msg)
	}
}
