package cliutil

import "testing"

func TestParseSize(t *testing.T) {
	for s, want := range map[string]int64{"0": 0, "4096": 4096, "512k": 512 << 10, "100K": 100 << 10, "64M": 64 << 20,
		"64m": 64 << 20, "1G": 1 << 30, "2GiB": 2 << 30, "3mib": 3 << 20, " 8M ": 8 << 20,
		"3 MiB": -1, "12X": -1, "-1": -1, "-1M": -1, "": -1, "M": -1, "lots": -1, "99999999999G": -1} {
		got, err := ParseSize(s)
		if want < 0 {
			if err == nil {
				t.Errorf("ParseSize(%q) = %d, want an error", s, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v, want %d", s, got, err, want)
		}
	}
}

func TestSizeName(t *testing.T) {
	for n, want := range map[int64]string{8 << 20: "8M", 512 << 10: "512K", 3 << 30: "3G", 1536 << 10: "1536K", 1000: "1000", 0: "0"} {
		if got := SizeName(n); got != want {
			t.Errorf("SizeName(%d) = %q, want %q", n, got, want)
		}
		if n > 0 {
			if back, err := ParseSize(SizeName(n)); err != nil || back != n {
				t.Errorf("ParseSize(SizeName(%d)) = %d, %v", n, back, err)
			}
		}
	}
}
