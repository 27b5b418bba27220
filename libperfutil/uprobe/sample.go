package uprobe

import "encoding/binary"

// Probe samples are read from a perf ring (internal/perfring) and
// decoded here.

// Sample is a decoded probe sample (EntrySample or ReturnSample layout).
type Sample struct {
	ID       uint64
	PID, TID uint32
	Time     uint64
	TopWord  uint64 // the user stack's top word (entry samples)
	HasTop   bool
	// Read is the group leader's count at the hit (probes opened with
	// OpenOpts.Group: Layout.Read).
	Read uint64
	// Regs are the sampled user registers (Layout.Regs of them, in the
	// mask's bit order; OpenOpts.Regs), when HasRegs.
	Regs    [4]uint64
	HasRegs bool
}

// Layout says which optional parts a probe sample has.
type Layout struct {
	Stack bool // the entry layout: the user stack's top word
	Read  bool // PERF_SAMPLE_READ of a group (OpenOpts.Group)
	// Regs is the number of user registers sampled (the bits of
	// OpenOpts.Regs; at most 4 are kept).
	Regs int
}

// DecodeSample decodes a PERF_RECORD_SAMPLE body of a probe event; entry
// says whether the layout has the stack word. The identifier comes first
// in both layouts, so a caller can read it (ID) before choosing.
func DecodeSample(b []byte, entry bool) (Sample, bool) {
	return Decode(b, Layout{Stack: entry})
}

// Decode decodes a PERF_RECORD_SAMPLE body of a probe event of layout l.
func Decode(b []byte, l Layout) (Sample, bool) {
	var s Sample
	if len(b) < 24 {
		return s, false
	}
	s.ID = binary.LittleEndian.Uint64(b)
	s.PID = binary.LittleEndian.Uint32(b[8:])
	s.TID = binary.LittleEndian.Uint32(b[12:])
	s.Time = binary.LittleEndian.Uint64(b[16:])
	b = b[24:]
	if l.Read {
		// PERF_FORMAT_GROUP: nr, then nr values, the leader's first.
		if len(b) < 16 {
			return s, false
		}
		nr := binary.LittleEndian.Uint64(b)
		if nr == 0 || nr > uint64(len(b)/8-1) {
			return s, false
		}
		s.Read = binary.LittleEndian.Uint64(b[8:])
		b = b[8+8*nr:]
	}
	if l.Regs > 0 {
		// PERF_SAMPLE_REGS_USER: abi, then the registers unless abi is
		// PERF_SAMPLE_REGS_ABI_NONE (a hit without user registers).
		if len(b) < 8 {
			return s, false
		}
		abi := binary.LittleEndian.Uint64(b)
		b = b[8:]
		if abi != 0 {
			if len(b) < 8*l.Regs {
				return s, false
			}
			for i := 0; i < l.Regs && i < len(s.Regs); i++ {
				s.Regs[i] = binary.LittleEndian.Uint64(b[8*i:])
			}
			s.HasRegs = true
			b = b[8*l.Regs:]
		}
	}
	if !l.Stack {
		return s, true
	}
	if len(b) < 8 {
		return s, false
	}
	n := binary.LittleEndian.Uint64(b)
	if n == 0 || n > uint64(len(b)-8) {
		return s, true // no stack dumped (kernel thread, fault)
	}
	if len(b) < 16+int(n) {
		return s, false
	}
	dyn := binary.LittleEndian.Uint64(b[8+n:])
	if dyn >= 8 && n >= 8 {
		s.TopWord = binary.LittleEndian.Uint64(b[8:])
		s.HasTop = true
	}
	return s, true
}

// ID reads a sample record's identifier (PERF_SAMPLE_IDENTIFIER first).
func SampleID(b []byte) (uint64, bool) {
	if len(b) < 8 {
		return 0, false
	}
	return binary.LittleEndian.Uint64(b), true
}
