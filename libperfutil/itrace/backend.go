package itrace

import (
	"fmt"
	"os"

	"perfinsp/libperfutil/control"
	"perfinsp/libperfutil/kmodbackend"
)

// moduleBackend picks where ITrace runs, as the facility's backends are
// picked (control.ChooseBackend): kmod forces the pitrace module, daemon
// forces pitraced's ptrace tracer, auto (or unset) takes the module when
// /dev/pitrace exists. It returns nil (and no error) for the daemon.
func moduleBackend(name string) (*kmodbackend.Backend, error) {
	name, err := control.ChooseBackend(name)
	if err != nil {
		return nil, fmt.Errorf("itrace: %w", err)
	}
	switch name {
	case control.BackendDaemon:
		return nil, nil
	case control.BackendAuto:
		if _, err := os.Stat(kmodbackend.Device); err != nil {
			return nil, nil
		}
	}
	b, err := kmodbackend.Open()
	if err != nil {
		return nil, fmt.Errorf("itrace: %w", err)
	}
	if !b.HasITrace() {
		b.Close()
		return nil, fmt.Errorf("itrace: the loaded pitrace module has no ITrace: load a newer one (make kmod), or use the daemon (PERFINSP_BACKEND=daemon after rmmod pitrace)")
	}
	return b, nil
}

// Backend names where On, Off, ITraceOn and ITraceOff go with the backend
// name given (or PERFINSP_BACKEND): "kmod" or "daemon".
func Backend(name string) (string, error) {
	b, err := moduleBackend(name)
	if err != nil {
		return "", err
	}
	if b == nil {
		return "daemon", nil
	}
	b.Close()
	return "kmod", nil
}

func onModule(b *kmodbackend.Backend, a OnArgs) (OnResult, error) {
	var r OnResult
	if len(a.TIDs) > 0 {
		return r, fmt.Errorf("itrace: the module traces single threads only as ITraceOn (the calling thread)")
	}
	if a.MaxInsns > 0 {
		return r, fmt.Errorf("itrace: an instruction limit needs pitraced's tracer, not the module: bound the run in time instead (run.itrace -s), or PERFINSP_BACKEND=daemon")
	}
	n, skipped, err := b.ITraceOn(kmodbackend.ITraceSel{PIDs: a.PIDs, PIDsFrom: a.PIDsFrom, Follow: a.Follow, AtExec: a.AtExec, Step: string(a.Step)})
	if err != nil {
		return r, err
	}
	r.Threads = n
	for i := 0; i < skipped; i++ {
		r.Skipped = append(r.Skipped, "not allowed or gone")
	}
	return r, nil
}

func offModule(b *kmodbackend.Backend, self bool, pids []int) (OffResult, error) {
	res, err := b.ITraceOff(self, pids)
	if err != nil {
		return OffResult{}, err
	}
	r := OffResult{Threads: res.Threads, Instructions: res.Instructions, Records: res.Records}
	if res.Threads > 0 {
		r.Sessions = 1
	}
	return r, nil
}
