package main

import (
	"fmt"
	"math"
	"os"
	"sort"

	"github.com/urfave/cli/v2"

	"perfinsp/analysis/callflow"

	"perfinsp/analysis/itrace"
)

var checkCommand = &cli.Command{
	Name:  "check",
	Usage: "compare the calibrated per-function figures with an exact reference (ITrace or callgrind)",
	Description: "With --itrace ARC (the arc report of the ITrace of the same instrumented binary, its hooks not\n" +
		"recording: HOOKIT_DIR unset): the reference is every function's own instructions between its hook\n" +
		"calls, as libhookit charges them, with the hook library's left out; the environmental overhead comes\n" +
		"from the same trace. Or with --callgrind FILE: " +
		"for every instrumented function of the run: its calls must equal callgrind's, and its calibrated\n" +
		"BASE must be within --pct percent or --per-call units per call (whichever is larger) of callgrind's\n" +
		"exclusive Ir, counted as the hooks see a function: its return instruction runs after its exit\n" +
		"event, so it is its caller's (reference = Ir - calls + calls made). The reference is callgrind's run\n" +
		"of the same program built without\n" +
		"-finstrument-functions, with the same input; the metric must count instructions (the module's tsc\n" +
		"under QEMU -icount shift=0). The start-up calibration, the sequence minima and the raw metric are\n" +
		"printed side by side; --cal says which one must pass. Exit status 1 when one function is out.",
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "i", Aliases: []string{"in"}, Value: ".", Usage: "directory with the hookit files"},
		&cli.StringFlag{Name: "itrace", Usage: "the `ARC` report of the ITrace of the instrumented binary run with its hooks not recording"},
		&cli.StringFlag{Name: "callgrind", Usage: "callgrind output `FILE` of the uninstrumented program"},
		&cli.StringFlag{Name: "env", Usage: "the uninstrumented trainer's ITrace `ARC` report: the minima less the environmental overhead"},
		&cli.StringFlag{Name: "cal", Value: "minima", Usage: "the calibration that must pass: minima (the run's sequence minima, 8x3) or startup"},
		&cli.Float64Flag{Name: "pct", Value: 0.5, Usage: "tolerance in percent of the reference"},
		&cli.Float64Flag{Name: "per-call", Value: 2, Usage: "tolerance in units per call"},
	},
	Action: check,
}

func check(c *cli.Context) error {
	var ref map[string]*itrace.CGFunc
	var itRef *callflow.Reference
	switch {
	case c.String("itrace") != "":
		f, err := os.Open(c.String("itrace"))
		if err != nil {
			return fmt.Errorf("opening the ITrace reference: %w", err)
		}
		itRef, err = callflow.ReferenceFromArc(f, callflow.SeqKeyPI)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", c.String("itrace"), err)
		}
		ref = map[string]*itrace.CGFunc{}
		for n, v := range itRef.Self {
			ref[n] = &itrace.CGFunc{Name: n, Self: v, Calls: itRef.Calls[n]}
		}
		for n, v := range itRef.Calls { // functions with no instructions of their own
			if ref[n] == nil {
				ref[n] = &itrace.CGFunc{Name: n, Calls: v}
			}
		}
	case c.String("callgrind") != "":
		f, err := os.Open(c.String("callgrind"))
		if err != nil {
			return fmt.Errorf("opening the callgrind reference: %w", err)
		}
		ref, err = itrace.ParseCallgrind(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", c.String("callgrind"), err)
		}
	default:
		return fmt.Errorf("give the reference: --itrace ARC (ITrace of the instrumented binary, hooks not recording) or --callgrind FILE (the uninstrumented build)")
	}
	procs, err := callflow.Load(c.String("i"))
	if err != nil {
		return err
	}
	if len(procs) != 1 {
		return fmt.Errorf("%d processes in %s: check compares one", len(procs), c.String("i"))
	}
	p := procs[0]
	callees := map[string]uint64{} // calls made, per function
	flat := func(cal callflow.Calibration) map[string]callflow.FlatRow {
		m := map[string]callflow.FlatRow{}
		a := callflow.AnalyzeWith(p, cal)
		for _, r := range a.Flat() {
			m[r.Name] = r
		}
		clear(callees)
		for _, t := range a.Trees {
			t.Root.Walk(func(n *callflow.Node) {
				if n.Parent != nil {
					callees[n.Name] += n.Callees
				}
			})
		}
		return m
	}
	startup, minima := flat(callflow.StartupCalibration(p)), flat(callflow.MinimaCalibration(p, callflow.SeqKeyPI))
	withEnv := minima
	envNote := "no --env"
	if path := c.String("env"); path != "" || itRef != nil {
		cal := callflow.MinimaCalibration(p, callflow.SeqKeyPI)
		var env *callflow.Minima
		if itRef != nil {
			env = itRef.Env
		} else if env, err = callflow.LoadEnv(path, p, callflow.SeqKeyPI); err != nil {
			return err
		}
		cal.Minima.Env = env
		withEnv = flat(cal)
		envNote = "env"
		for _, k := range env.Keys() {
			envNote += fmt.Sprintf(" %s=%d", env.Key.Name(k), env.Min[k])
		}
	}
	must := withEnv
	switch c.String("cal") {
	case "minima":
	case "minima-noenv":
		must = minima
	case "startup":
		must = startup
	default:
		return fmt.Errorf("--cal %q: use minima or startup", c.String("cal"))
	}
	var names []string
	for n := range minima {
		if n != "(outside)" {
			names = append(names, n)
		}
	}
	flat(callflow.Calibration{}) // the call counts (callees) are the same in every calibration
	sort.Slice(names, func(i, j int) bool { return minima[names[i]].Rough > minima[names[j]].Rough })
	fmt.Printf("  hookit check: metric %s (backend %s), t_I %.2f t_O %.2f; %s; tolerance max(%.2f %%, %.1f per call); %s must pass\n",
		p.Info.Metric, p.Info.Backend, p.Info.TInner, p.Info.TOuter, envNote, c.Float64("pct"), c.Float64("per-call"), c.String("cal"))
	sysCols := func(r callflow.FlatRow) string { return "" }
	sysHead := ""
	if p.Info.HasSys() {
		in := "not in"
		if p.Info.Sys == "in" {
			in = "part of"
		}
		fmt.Printf("  SYS / NSYS: the metric of each function's own system calls (%s its figures; %.0f per call of kernel entry and exit code included%s) and their number\n",
			in, p.Info.SysGlue, p.Info.ResumeNote())
		sysHead = fmt.Sprintf(" %11s %7s", "SYS", "NSYS")
		sysCols = func(r callflow.FlatRow) string { return fmt.Sprintf(" %11d %7d", r.Sys, r.SysN) }
	}
	if p.Info.HasFaults() {
		in := "not in"
		if p.Info.Faults == "in" {
			in = "part of"
		}
		fmt.Printf("  FLT / NFLT: the metric of each function's own page faults in user mode (%s its figures; %.0f per fault of exception entry and exit code included) and their number\n",
			in, p.Info.FaultGlue)
		sysHead += fmt.Sprintf(" %11s %7s", "FLT", "NFLT")
		prev := sysCols
		sysCols = func(r callflow.FlatRow) string { return prev(r) + fmt.Sprintf(" %11d %7d", r.Flt, r.FltN) }
	}
	fmt.Printf("  %-12s %9s %9s %11s %11s %11s %11s %11s %9s %9s %9s %9s%s  %s\n", "NAME", "CALLS", "CG CALLS", "REFERENCE",
		"MIN-ENV", "MINIMA", "STARTUP", "RAW", "ERR/CALL", "(MINIMA)", "(STARTUP)", "(RAW)", sysHead, "")
	bad, interrupted := 0, 0
	for _, n := range names {
		r := ref[n]
		row := must[n]
		var refIr, refCalls uint64
		switch {
		case r != nil && itRef != nil:
			refCalls, refIr = r.Calls, r.Self
		case r != nil:
			// callgrind, as the hooks see a function: its own return
			// instructions are its caller's, its callees' its own.
			refCalls = r.Calls
			refIr = r.Self + callees[n] - min(r.Calls, r.Self+callees[n])
		}
		calls := float64(max(row.Calls, 1))
		tol := math.Max(c.Float64("pct")/100*float64(refIr), c.Float64("per-call")*calls)
		e := func(v uint64) float64 { return (float64(v) - float64(refIr)) / calls }
		verdict := "ok"
		switch {
		case r == nil:
			verdict = "out: not in the callgrind reference"
		case refCalls != row.Calls:
			verdict = fmt.Sprintf("out: %d calls, callgrind %d", row.Calls, refCalls)
		case math.Abs(float64(row.Base)-float64(refIr)) > tol:
			verdict = fmt.Sprintf("out: off by %.0f (tolerance %.0f)", float64(row.Base)-float64(refIr), tol)
			if row.IN > 0 {
				// PTT factors out the irq handlers (irq_handler_entry/exit
				// and the vector tracepoints), not the entry and exit code
				// around them: an interrupt leaves those in the function.
				verdict += fmt.Sprintf("; %d interrupts while it ran: their entry/exit code is not factored out", row.IN)
				interrupted++
			}
		}
		if verdict != "ok" {
			bad++
		}
		fmt.Printf("  %-12s %9d %9d %11d %11d %11d %11d %11d %9.2f %9.2f %9.2f %9.2f%s  %s\n", n, row.Calls, refCalls, refIr,
			withEnv[n].Base, minima[n].Base, startup[n].Base, minima[n].Rough, e(must[n].Base), e(minima[n].Base), e(startup[n].Base),
			e(minima[n].Rough), sysCols(row), verdict)
	}
	if bad > 0 {
		if interrupted > 0 {
			return fmt.Errorf("%d of %d functions out of tolerance or with other call counts (%d of them interrupted)", bad, len(names), interrupted)
		}
		return fmt.Errorf("%d of %d functions out of tolerance or with other call counts", bad, len(names))
	}
	fmt.Printf("  hookit check: %d functions within tolerance, calls exact\n", len(names))
	return nil
}
