package a2n

// KsymLine splits one line of /proc/kallsyms ("ffffffff81000000 T _stext",
// "ffffffffc0a01000 t fn\t[module]") into a text symbol's address, its
// name and its module (inMod: the line names one; mod is trimmed of the
// brackets). ok is false for a line that is not a text symbol's (t, T, w,
// W) or whose address is zero (kptr_restrict). The one parser of the
// format, for post's resolver and the continuous agent's table.
func KsymLine[T string | []byte](line T) (addr uint64, name, mod T, inMod, ok bool) {
	if len(line) < 20 || line[16] != ' ' || line[18] != ' ' {
		return 0, name, mod, false, false
	}
	switch line[17] {
	case 't', 'T', 'w', 'W':
	default:
		return 0, name, mod, false, false
	}
	addr, ok = parseHex(line[:16])
	if !ok || addr == 0 {
		return 0, name, mod, false, false
	}
	name = line[19:]
	for i := 0; i < len(name); i++ {
		if name[i] == '\t' {
			mod, name, inMod = trimMod(name[i+1:]), name[:i], true
			break
		}
	}
	return addr, name, mod, inMod, true
}

// trimMod drops the brackets, spaces and tabs around a module's name.
func trimMod[T string | []byte](s T) T {
	cut := func(c byte) bool { return c == '[' || c == ']' || c == ' ' || c == '\t' }
	for len(s) > 0 && cut(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && cut(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}

// parseHex reads hexadecimal digits (no prefix); false on any other byte.
func parseHex[T string | []byte](s T) (uint64, bool) {
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(c)
	}
	return v, true
}
