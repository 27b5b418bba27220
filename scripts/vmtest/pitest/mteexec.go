package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"perfinsp/format/trace"
	"perfinsp/libperfutil/control"
)

// mteExec traces an exec by a relative name ("./NAME" run in DIR) and
// checks the module's MTE: the EXEC record carries the path the kernel
// found (DIR/NAME), and the PROCESS record written after the exec names
// the real parent (this process).
func mteExec(dir, name string) error {
	f, err := control.Open("kmod")
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Free(); err != nil {
		return err
	}
	if err := f.SetMode(control.ModeNormal, ""); err != nil {
		return err
	}
	if err := f.Init(control.Config{TraceBufSize: 1 << 20, MTEBufSize: 1 << 20}); err != nil {
		return err
	}
	if err := f.On(); err != nil {
		return fmt.Errorf("on: %w", err)
	}
	cmd := exec.Command("./"+name, "5")
	cmd.Dir = dir // "./name" is evaluated relative to Dir (execve of "./name" there)
	runErr := cmd.Run()
	if err := f.Off(); err != nil {
		return fmt.Errorf("off: %w", err)
	}
	out := "/tmp/mteexec.nrm2"
	if err := f.Get(out); err != nil {
		return fmt.Errorf("get: %w", err)
	}
	if err := f.Free(); err != nil {
		return err
	}
	if runErr != nil {
		return fmt.Errorf("run ./%s in %s: %w", name, dir, runErr)
	}
	child := uint64(cmd.Process.Pid)
	s, err := load(out)
	if err != nil {
		return err
	}
	want := filepath.Join(dir, name)
	var execPath string
	var execCPU = -1
	ppid := uint64(1 << 40)
	for _, r := range s.recs {
		if !r.MTE || r.Major != trace.MajorMTE || r.Field(0) != child {
			continue
		}
		if r.Minor == trace.MTEExec {
			execPath, execCPU = r.Str, r.CPU
			continue
		}
		if r.Minor == trace.MTEProcess && execCPU == r.CPU && ppid == 1<<40 {
			ppid = r.Field(1)
		}
	}
	fmt.Printf("mteexec: ./%s run in %s as pid %d by pid %d: MTE_EXEC path %q, then MTE_PROCESS ppid %d\n",
		name, dir, child, os.Getpid(), execPath, int64(ppid))
	var bad []string
	if execPath != want {
		bad = append(bad, fmt.Sprintf("MTE_EXEC path %q, want %q (as found, not as typed)", execPath, want))
	}
	if ppid != uint64(os.Getpid()) {
		bad = append(bad, fmt.Sprintf("MTE_PROCESS after the exec: ppid %d, want %d", int64(ppid), os.Getpid()))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s", strings.Join(bad, "; "))
	}
	fmt.Println("mteexec: ok")
	return nil
}
