package procscan

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/trace"
)

type rec struct {
	minor  uint32
	fields []uint64
	str    string
}

func collect(t *testing.T, fn func(Emit) error) []rec {
	t.Helper()
	var out []rec
	err := fn(func(minor uint32, fields []uint64, str string) {
		out = append(out, rec{minor, append([]uint64(nil), fields...), str})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func marker() int { return 42 }

func TestScanFindsSelf(t *testing.T) {
	// a thread of our own, alive during the scan
	tidc, release := make(chan int), make(chan struct{})
	go func() {
		runtime.LockOSThread()
		tidc <- unix.Gettid()
		<-release
	}()
	tid := <-tidc
	defer close(release)

	recs := collect(t, func(e Emit) error { return Scan(77, e) })
	pid := uint64(os.Getpid())
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe, _ = filepath.EvalSymlinks(exe)
	comm, _ := os.ReadFile("/proc/self/comm")
	pc := uint64(reflect.ValueOf(marker).Pointer())

	var proc, thread, mainThread, seg bool
	procs := 0
	for _, r := range recs {
		switch r.minor {
		case trace.MTEProcess:
			procs++
			if r.fields[0] == pid {
				proc = true
				if r.fields[1] != uint64(os.Getppid()) || r.str != strings.TrimSpace(string(comm)) {
					t.Errorf("own MTEProcess = %v %q, want ppid %d comm %q", r.fields, r.str, os.Getppid(), comm)
				}
			}
		case trace.MTEThreadName:
			if r.fields[0] == pid && r.fields[1] == uint64(tid) {
				thread = true
			}
			if r.fields[0] == pid && r.fields[1] == pid {
				mainThread = true
			}
		case trace.MTESegment:
			if len(r.fields) != 5 {
				t.Fatalf("MTESegment with %d fields", len(r.fields))
			}
			if r.fields[4]&ProtExec == 0 {
				t.Errorf("non-executable segment emitted: %v %q", r.fields, r.str)
			}
			if r.fields[0] == pid && r.str == exe && pc >= r.fields[1] && pc < r.fields[1]+r.fields[2] {
				seg = true
			}
		}
	}
	if !proc || !thread || !mainThread || !seg {
		t.Fatalf("own process %v, locked thread %d %v, main thread %v, text segment of %s containing %#x %v (of %d records, %d processes)",
			proc, tid, thread, mainThread, exe, pc, seg, len(recs), procs)
	}
	if procs < 2 {
		t.Errorf("only %d processes found", procs)
	}
	t.Logf("%d records, %d processes", len(recs), procs)
}

func TestDescribeMissing(t *testing.T) {
	err := Describe(1<<30, 1, func(uint32, []uint64, string) { t.Error("emit for a missing pid") })
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Describe(missing) = %v, want ErrNotExist", err)
	}
}

func TestTgidOfThread(t *testing.T) {
	tidc := make(chan int)
	release := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		tidc <- unix.Gettid()
		<-release
	}()
	tid := <-tidc
	defer close(release)
	g, err := Tgid(tid)
	if err != nil {
		t.Fatal(err)
	}
	if g != os.Getpid() {
		t.Fatalf("Tgid(%d) = %d, want %d", tid, g, os.Getpid())
	}
	pp, err := Ppid(os.Getpid())
	if err != nil || pp != os.Getppid() {
		t.Fatalf("Ppid = %d, %v; want %d", pp, err, os.Getppid())
	}
}

func TestParseMapsLine(t *testing.T) {
	cases := []struct {
		line string
		want Mapping
	}{
		{"55d0c8a00000-55d0c8a21000 r-xp 00001000 08:01 1234                       /usr/bin/my prog (x)",
			Mapping{0x55d0c8a00000, 0x55d0c8a21000, 0x1000, ProtRead | ProtExec, "/usr/bin/my prog (x)"}},
		{"7f0000000000-7f0000001000 rwxp 00000000 00:00 0 ",
			Mapping{0x7f0000000000, 0x7f0000001000, 0, ProtRead | ProtWrite | ProtExec, AnonPath}},
		{"7ffd1000-7ffd3000 r-xp 00000000 00:00 0                          [vdso]",
			Mapping{0x7ffd1000, 0x7ffd3000, 0, ProtRead | ProtExec, "[vdso]"}},
		{"1000-2000 r--p 00002000 08:01 99 /lib/x.so (deleted)",
			Mapping{0x1000, 0x2000, 0x2000, ProtRead, "/lib/x.so (deleted)"}},
	}
	for _, c := range cases {
		got, ok := ParseMapsLine([]byte(c.line))
		if !ok || got != c.want {
			t.Errorf("ParseMapsLine(%q) = %+v, %v; want %+v", c.line, got, ok, c.want)
		}
	}
	for _, bad := range []string{"", "zz-10 r-xp 0 0 0", "10-zz r-xp 0 0 0", "20-10 r-xp 0 0 0", "10-20 r- 0 0 0", "10-20 r-xp qq 0 0"} {
		if _, ok := ParseMapsLine([]byte(bad)); ok {
			t.Errorf("ParseMapsLine(%q) accepted", bad)
		}
	}
}

// A fake /proc where nothing is readable: Scan must say so; where one
// process is fine and another is malformed, Scan succeeds with the good one.
func TestScanErrors(t *testing.T) {
	old := Root
	defer func() { Root = old }()
	Root = t.TempDir()
	if err := os.MkdirAll(Root+"/12/task/12", 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(Root+"/12/stat", []byte("garbage"), 0o644)
	err := Scan(1, func(uint32, []uint64, string) {})
	if err == nil || !strings.Contains(err.Error(), "no process could be read") {
		t.Fatalf("Scan of unreadable /proc = %v", err)
	}

	os.MkdirAll(Root+"/13/task/13", 0o755)
	os.MkdirAll(Root+"/13/task/14", 0o755)
	os.WriteFile(Root+"/13/stat", []byte("13 (a (b) c) S 1 13 13 0"), 0o644)
	os.WriteFile(Root+"/13/task/14/comm", []byte("worker\n"), 0o644)
	os.WriteFile(Root+"/13/maps", []byte("1000-3000 r-xp 00000000 08:01 5 /bin/a b\n3000-4000 rw-p 00000000 08:01 5 /bin/a b\n"), 0o644)
	os.WriteFile(Root+"/notapid", nil, 0o644)
	recs := collect(t, func(e Emit) error { return Scan(9, e) })
	want := []rec{
		{trace.MTEProcess, []uint64{13, 1}, "a (b) c"},
		{trace.MTEThreadName, []uint64{13, 13}, "a (b) c"},
		{trace.MTEThreadName, []uint64{13, 14}, "worker"},
		{trace.MTESegment, []uint64{13, 0x1000, 0x2000, 0, ProtRead | ProtExec}, "/bin/a b"},
	}
	// thread order follows readdir; sort the two thread records
	if len(recs) == 4 && recs[1].minor == trace.MTEThreadName && recs[1].fields[1] == 14 {
		recs[1], recs[2] = recs[2], recs[1]
	}
	if !reflect.DeepEqual(recs, want) {
		t.Fatalf("fake /proc scan:\n got %v\nwant %v", recs, want)
	}
	if _, err := Tgid(99); err == nil {
		t.Fatal("Tgid of a missing thread succeeded")
	}
	os.MkdirAll(Root+"/15", 0o755)
	os.WriteFile(Root+"/15/status", []byte("Name:\tx\nTgid:\t13\nPPid:\t1\n"), 0o644)
	if g, err := Tgid(15); err != nil || g != 13 {
		t.Fatalf("Tgid(15) = %d, %v", g, err)
	}
	os.WriteFile(Root+"/15/status", []byte("Name:\tx\nTgid:\tq\n"), 0o644)
	if _, err := Tgid(15); err == nil {
		t.Fatal("bad Tgid accepted")
	}
}
