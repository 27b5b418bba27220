package continuous

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// maxConfigFile bounds the configuration file.
const maxConfigFile = 64 << 10

// Setting is one "name = value" line of a configuration file.
type Setting struct {
	Name, Value string
	Line        int
}

// ReadConfigFile reads a configuration file: one "name = value" per line
// (the names of pitraced continuous's flags without the dashes), blank
// lines and lines starting with # ignored. The file names where profiles
// go and what credentials they carry, so it must be a regular file owned
// by root (or the user running the agent) that no one else may write.
func ReadConfigFile(path string) ([]Setting, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("config file %s is not a regular file", path)
	case !ok || (st.Uid != 0 && int(st.Uid) != os.Geteuid()):
		return nil, fmt.Errorf("config file %s must be owned by root: chown root %s", path, path)
	case fi.Mode().Perm()&0o022 != 0:
		return nil, fmt.Errorf("config file %s may be written by others: chmod go-w %s", path, path)
	case fi.Size() > maxConfigFile:
		return nil, fmt.Errorf("config file %s: %d bytes, more than %d", path, fi.Size(), maxConfigFile)
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil && fi.Size() > 0 {
		return nil, fmt.Errorf("config file: %w", err)
	}
	var out []Setting
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || name == "" {
			return nil, fmt.Errorf("%s:%d: want name = value, got %q", path, n, line)
		}
		out = append(out, Setting{Name: name, Value: value, Line: n})
	}
	return out, nil
}
