//go:build cgo

// Package hookabi reads the thread-file layout from
// libperfutil/c/hookit/hookit.h through cgo, for the layout test of
// callflow. It is never linked into a tool. The headers are symbolic
// links in this directory: the go command hashes a package's own .h files
// into its build cache key, and would not see a change to a header it
// reached through an include path.
package hookabi

/*
#include <stddef.h>
#include "hookit.h"
#include "hookit_api.h"
enum {
	offsetof_tag = offsetof(struct hk_rec, tag),
	offsetof_d = offsetof(struct hk_rec, d),
};
static unsigned hk_slot(uint64_t fn) { return HK_SLOT(fn); }
static uint64_t hk_short_tag(int exit, unsigned slot) { return HK_SHORT_TAG(exit, slot); }
*/
import "C"

// Values returns the header's constants and the record's offsets.
func Values() map[string]uint64 {
	return map[string]uint64{
		"sizeof hk_rec":         uint64(C.sizeof_struct_hk_rec),
		"offsetof hk_rec.tag":   uint64(C.offsetof_tag),
		"offsetof hk_rec.d":     uint64(C.offsetof_d),
		"HK_SYNC":               uint64(C.HK_SYNC),
		"HK_DSIN":               uint64(C.HK_DSIN),
		"HK_SYS":                uint64(C.HK_SYS),
		"HK_FLT":                uint64(C.HK_FLT),
		"HK_WALL":               uint64(C.HK_WALL),
		"HK_HOOK_SHIFT":         uint64(C.HK_HOOK_SHIFT),
		"HK_SPD_SHIFT":          uint64(C.HK_SPD_SHIFT),
		"HK_END":                uint64(C.HK_END),
		"HK_MAGIC":              uint64(C.HK_MAGIC),
		"HK_VERSION":            uint64(C.HK_VERSION),
		"HK_KIND_SHIFT":         uint64(C.HK_KIND_SHIFT),
		"HK_ENTER":              uint64(C.HK_ENTER),
		"HK_EXIT":               uint64(C.HK_EXIT),
		"HK_ADJUST":             uint64(C.HK_ADJUST),
		"HK_MARK":               uint64(C.HK_MARK),
		"HK_MARK_EXIT":          uint64(C.HK_MARK_EXIT),
		"HK_MARK_RESET":         uint64(C.HK_MARK_RESET),
		"HK_MARK_START":         uint64(C.HK_MARK_START),
		"HK_MARK_END":           uint64(C.HK_MARK_END),
		"HK_EXC_EXIT":           uint64(C.HK_EXC_EXIT),
		"HK_API_SHIFT":          uint64(C.HK_API_SHIFT),
		"HK_INL_SHIFT":          uint64(C.HK_INL_SHIFT),
		"HK_TYPE_SHIFT":         uint64(C.HK_TYPE_SHIFT),
		"HK_TYPE_MASK":          uint64(C.HK_TYPE_MASK),
		"HOOKIT_NTYPES":         uint64(C.HOOKIT_NTYPES),
		"HOOKIT_TYPE_NATIVE":    uint64(C.HOOKIT_TYPE_NATIVE),
		"HOOKIT_TYPE_COMPILING": uint64(C.HOOKIT_TYPE_COMPILING),
		"HK_SHORT":              uint64(C.HK_SHORT),
		"HK_SHORT_SHIFT":        uint64(C.HK_SHORT_SHIFT),
		"HK_SHORT_EXIT_SHIFT":   uint64(C.HK_SHORT_EXIT_SHIFT),
		"HK_SHORT_API_SHIFT":    uint64(C.HK_SHORT_API_SHIFT),
		"HK_SHORT_INL_SHIFT":    uint64(C.HK_SHORT_INL_SHIFT),
		"HK_SLOT_SHIFT":         uint64(C.HK_SLOT_SHIFT),
		"HK_SHORT_SPD_SHIFT":    uint64(C.HK_SHORT_SPD_SHIFT),
		"HK_SLOTS":              uint64(C.HK_SLOTS),
	}
}

// Slot is HK_SLOT(fn).
func Slot(fn uint64) int { return int(C.hk_slot(C.uint64_t(fn))) }

// ShortTag is HK_SHORT_TAG(exit, slot).
func ShortTag(exit bool, slot int) uint64 {
	e := C.int(0)
	if exit {
		e = 1
	}
	return uint64(C.hk_short_tag(e, C.unsigned(slot)))
}
