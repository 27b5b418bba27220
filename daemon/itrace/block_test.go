package itrace

import (
	"os"

	itracectl "perfinsp/libperfutil/itrace"
	"strings"
	"testing"
)

// minChecked: the example runs ~60,000 blocks in its own code and libc's
// (the loader's included); a check of fewer has skipped most of them.
const minChecked = 20000

// TestExampleVerify single-steps the example with --step verify: at every
// taken branch the block decoder decodes the block from where a block step
// would have started and must give the stepped count, last instruction
// and kind. 0 disagreements over more than minChecked blocks, and the
// counts still equal callgrind's.
func TestExampleVerify(t *testing.T) {
	st := traceExample(t, Options{Step: itracectl.StepVerify})
	t.Logf("verify: %d blocks checked, %d disagreements, %.0f ns per block decoded", st.BlocksChecked, st.BlockMismatches,
		float64(st.BlockNs)/float64(max(st.BlocksChecked, 1)))
	if st.BlocksChecked < minChecked || st.BlockMismatches != 0 {
		t.Errorf("verify: %d blocks checked (want > %d), %d disagreements (want 0)", st.BlocksChecked, minChecked, st.BlockMismatches)
	}
	if st.BlockSteps != 0 {
		t.Errorf("verify block-stepped %d times: it must single-step", st.BlockSteps)
	}
}

// TestExampleEmulatedBTF runs the tracer's block-stepping on this machine,
// which ignores BTF: each block step is single steps whose stops at a
// fall-through (a non-branch, a jcc not taken) are resumed silently, so
// the accounting sees only the stops of a CPU honouring BTF and counts
// with the block decoder. Detection must say "honoured", most stops must
// be block steps, every block step must equal what its single steps ran,
// and the counts equal callgrind's.
func TestExampleEmulatedBTF(t *testing.T) {
	st := traceExample(t, Options{emulateBTF: true})
	if st.BTF != "honoured" {
		t.Errorf("detection under emulated BTF: %q, want honoured", st.BTF)
	}
	if st.BlockSteps < minChecked || st.BlocksChecked < st.BlockSteps || st.BlockMismatches != 0 || st.BlocksLost != 0 {
		t.Errorf("emulated BTF: %d block steps (want > %d), %d checked, %d disagreements, %d uncounted (want 0)",
			st.BlockSteps, minChecked, st.BlocksChecked, st.BlockMismatches, st.BlocksLost)
	}
	t.Logf("stops: %d single steps + %d block steps for %d instructions", st.SingleSteps, st.BlockSteps, st.Instructions)
}

// TestSingleNeverBlockSteps: --step single takes no block step.
func TestSingleNeverBlockSteps(t *testing.T) {
	st := traceExample(t, Options{Step: itracectl.StepSingle})
	if st.BlockSteps != 0 || st.BTF != "" {
		t.Errorf("--step single: %d block steps, BTF %q; want none", st.BlockSteps, st.BTF)
	}
}

// A client's unknown step mode is refused before any thread is attached.
func TestUnknownStepRefused(t *testing.T) {
	tr, err := Start(Options{PIDs: []int{os.Getpid()}, Step: "sideways"}, &capture{})
	if err == nil {
		tr.Stop()
		t.Fatal("step mode \"sideways\" accepted")
	}
	if !strings.Contains(err.Error(), "unknown stepping") {
		t.Fatalf("error %q does not name the step mode", err)
	}
}
