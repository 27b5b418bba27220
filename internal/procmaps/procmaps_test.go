package procmaps

import "testing"

// Executable mappings only, with their bounds, offset, protection and a
// path holding spaces, the device and inode; anonymous and special ones kept; bad lines skipped.
func TestExecutable(t *testing.T) {
	maps := `55d0c0000000-55d0c0001000 r--p 00000000 08:01 123 /usr/bin/my prog
55d0c0001000-55d0c0005000 r-xp 00001000 fd:1a 1234567 /usr/bin/my prog
7f0000000000-7f0000001000 rw-p 00000000 00:00 0
7f0000001000-7f0000002000 rwxp 00000000 00:00 0
7fff00000000-7fff00001000 r-xp 00000000 00:00 0 [vdso]
garbage line
7fff00003000-7fff00001000 r-xp 00000000 00:00 0 /backwards
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
7fff00004000-7fff0000`
	var got []Mapping
	if err := Executable([]byte(maps), func(m Mapping) { got = append(got, m) }); err != nil {
		t.Fatal(err)
	}
	want := []Mapping{
		{Start: 0x55d0c0001000, End: 0x55d0c0005000, Offset: 0x1000, Prot: ProtRead | ProtExec, Path: "/usr/bin/my prog", Major: 0xfd, Minor: 0x1a, Inode: 1234567},
		{Start: 0x7f0000001000, End: 0x7f0000002000, Prot: ProtRead | ProtWrite | ProtExec},
		{Start: 0x7fff00000000, End: 0x7fff00001000, Prot: ProtRead | ProtExec, Path: "[vdso]"},
		{Start: 0xffffffffff600000, End: 0xffffffffff601000, Prot: ProtExec, Path: "[vsyscall]"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d mappings %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mapping %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// Reading a process's maps allocates for its executable mappings only: no
// scanner buffer, no copy of the lines of the others.
func TestExecutableAllocation(t *testing.T) {
	var maps []byte
	for i := 0; i < 200; i++ {
		maps = append(maps, "7f0000000000-7f0000001000 rw-p 00000000 00:00 0\n"...)
	}
	maps = append(maps, "55d0c0001000-55d0c0005000 r-xp 00001000 fd:1a 1234567 /usr/bin/prog\n"...)
	n := 0
	allocs := testing.AllocsPerRun(100, func() {
		_ = Executable(maps, func(Mapping) { n++ })
	})
	if allocs > 3 {
		t.Errorf("%.0f allocations to read 200 data mappings and one executable", allocs)
	}
	if n != 101 {
		t.Errorf("%d executable mappings in 101 reads, want 101", n)
	}
}
