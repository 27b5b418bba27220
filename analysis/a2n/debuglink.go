package a2n

import (
	"bytes"
	"debug/elf"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
)

var errBuild = errors.New("debug file of another build")

// debugLink is f's .gnu_debuglink: the base name of its separate debug
// file and that file's CRC-32; "" when f has none (or a name that is not a
// base name).
func debugLink(f *elf.File) (string, uint32) {
	sec := f.Section(".gnu_debuglink")
	if sec == nil || sec.Type == elf.SHT_NOBITS || sec.Size > 4096 {
		return "", 0
	}
	data, err := sectionData(sec)
	if err != nil {
		return "", 0
	}
	n := bytes.IndexByte(data, 0)
	if n <= 0 {
		return "", 0
	}
	name := string(data[:n])
	off := (n + 4) &^ 3 // the CRC follows the name's NUL, 4-byte aligned
	if off+4 > len(data) || strings.ContainsRune(name, '/') || name == "." || name == ".." {
		return "", 0
	}
	return name, f.ByteOrder.Uint32(data[off:])
}

// debugCandidates are the separate debug files of the module at path (f
// parsed from file, its path under the cache's root), in the order gdb
// looks for them: by build-id under DebugRoot/.build-id, then by
// .gnu_debuglink in the module's directory, its .debug subdirectory and
// DebugRoot followed by the module's directory (objcopy --only-keep-debug
// and --add-gnu-debuglink, as people split their own programs; Fedora's
// /usr/lib/debug/usr/bin/NAME.debug).
func debugCandidates(path, file, id string, f *elf.File) []string {
	var out []string
	if len(id) > 2 {
		out = append(out, filepath.Join(DebugRoot, ".build-id", id[:2], id[2:]+".debug"))
	}
	if name, _ := debugLink(f); name != "" {
		dir := filepath.Dir(file)
		for _, p := range []string{filepath.Join(dir, name), filepath.Join(dir, ".debug", name), filepath.Join(DebugRoot, filepath.Dir(path), name)} {
			if p != file {
				out = append(out, p)
			}
		}
	}
	return out
}

// sameBuild says whether the debug file ef (opened as df) belongs to the
// module f whose build-id is id: the same build-id when both have one,
// else the CRC-32 of the whole debug file the module's .gnu_debuglink
// holds (what gdb checks). A debug file of another build would name the
// module's addresses wrongly.
func sameBuild(f *elf.File, id string, ef *elf.File, df *os.File) bool {
	if did := buildID(ef); id != "" && did != "" {
		return did == id
	}
	name, crc := debugLink(f)
	if name == "" {
		return false
	}
	h := crc32.NewIEEE()
	if _, err := io.Copy(h, io.NewSectionReader(df, 0, MaxModuleSize)); err != nil {
		return false
	}
	return h.Sum32() == crc
}
