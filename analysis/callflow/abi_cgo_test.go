//go:build cgo

package callflow

import (
	"testing"

	"perfinsp/analysis/callflow/internal/hookabi"
)

// The Go reader's layout is the C header's.
func TestLayoutMatchesHookitHeader(t *testing.T) {
	want := map[string]uint64{
		"sizeof hk_rec": RecSize, "offsetof hk_rec.tag": 0, "offsetof hk_rec.d": 8,
		"HK_SYNC": KindSync, "HK_DSIN": KindDSIN, "HK_SYS": KindSys, "HK_FLT": KindFlt, "HK_WALL": KindWall, "HK_HOOK_SHIFT": HookShift, "HK_SPD_SHIFT": SPDShift, "HK_END": EndMark,
		"HK_MAGIC": Magic, "HK_VERSION": Version, "HK_KIND_SHIFT": KindShift,
		"HK_ENTER": KindEnter, "HK_EXIT": KindExit, "HK_ADJUST": KindAdjust, "HK_MARK": KindMark,
		"HK_EXC_EXIT": KindExcExit, "HK_API_SHIFT": APIShift, "HK_INL_SHIFT": InlShift, "HK_TYPE_SHIFT": TypeShift, "HK_TYPE_MASK": TypeMask,
		"HOOKIT_NTYPES": NumTypes, "HOOKIT_TYPE_NATIVE": 5, "HOOKIT_TYPE_COMPILING": 7,
		"HK_MARK_EXIT": MarkExit, "HK_MARK_RESET": MarkReset, "HK_MARK_START": MarkStart, "HK_MARK_END": MarkEnd,
		"HK_SHORT": Short, "HK_SHORT_SHIFT": ShortShift, "HK_SHORT_EXIT_SHIFT": ShortExitShift, "HK_SHORT_API_SHIFT": ShortAPIShift, "HK_SHORT_INL_SHIFT": ShortInlShift, "HK_SLOT_SHIFT": SlotShift,
		"HK_SHORT_SPD_SHIFT": ShortSPDShift, "HK_SLOTS": Slots,
	}
	got := hookabi.Values()
	for k, v := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: not read from hookit.h", k)
		} else if g != v {
			t.Errorf("%s: hookit.h says %d (%#x), Go says %d (%#x)", k, g, g, v, v)
		}
	}
}

// A function's slot and a short event's tag bits are the header's.
func TestSlotMatchesHookitHeader(t *testing.T) {
	for _, fn := range []uint64{0, 0x10, 0x401136, 0x55d0c8a41230, 0x7f3a2b1c4d50, 0xffffffffffff, 0x4000, 0x4010} {
		if g, w := hookabi.Slot(fn), Slot(fn); g != w {
			t.Errorf("slot of %#x: hookit.h %d, Go %d", fn, g, w)
		}
	}
	for _, exit := range []bool{false, true} {
		e := uint64(0)
		if exit {
			e = 1
		}
		if g, w := hookabi.ShortTag(exit, 1023), uint64(Short<<ShortShift|e<<ShortExitShift|1023<<SlotShift); g != w {
			t.Errorf("short tag (exit %v, slot 1023): hookit.h %#x, Go %#x", exit, g, w)
		}
	}
}
