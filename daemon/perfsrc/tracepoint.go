package perfsrc

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// tracefsRoots are the places the tracefs may be mounted, in order of preference.
var tracefsRoots = []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}

// tpField is where one field of a tracepoint's raw record is.
type tpField struct {
	offset, size int
	ok           bool
}

// get reads the field from raw (little-endian, zero-extended); 0 when the
// field is missing or the record is too short.
func (f tpField) get(raw []byte) uint64 {
	if !f.ok || f.offset < 0 || f.offset+f.size > len(raw) {
		return 0
	}
	b := raw[f.offset:]
	switch f.size {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(le16(b))
	case 4:
		return uint64(le32(b))
	case 8:
		return le64(b)
	}
	return 0
}

// tracepoint is the id and field layout of one tracepoint, from tracefs.
type tracepoint struct {
	system, name string
	id           uint64
	fields       map[string]tpField
}

// errNoTracepoint means the tracepoint does not exist on this kernel.
var errNoTracepoint = errors.New("tracepoint not found")

// loadTracepoint reads events/<system>/<name>/{id,format} from tracefs.
func loadTracepoint(system, name string) (*tracepoint, error) {
	var lastErr error
	for _, root := range tracefsRoots {
		dir := root + "/events/" + system + "/" + name
		b, err := os.ReadFile(dir + "/id")
		if err != nil {
			lastErr = err
			continue
		}
		id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("tracepoint %s:%s: bad id %q: %w", system, name, b, err)
		}
		f, err := os.Open(dir + "/format")
		if err != nil {
			return nil, fmt.Errorf("tracepoint %s:%s: %w", system, name, err)
		}
		defer f.Close()
		tp := &tracepoint{system: system, name: name, id: id, fields: map[string]tpField{}}
		if err := parseFormat(bufio.NewScanner(f), tp.fields); err != nil {
			return nil, fmt.Errorf("tracepoint %s:%s: %w", system, name, err)
		}
		return tp, nil
	}
	if errors.Is(lastErr, fs.ErrNotExist) {
		return nil, fmt.Errorf("tracepoint %s:%s: %w (is tracefs mounted at /sys/kernel/tracing?)", system, name, errNoTracepoint)
	}
	return nil, fmt.Errorf("tracepoint %s:%s: %w", system, name, lastErr)
}

// parseFormat reads the "field:TYPE NAME;\toffset:N;\tsize:N;\tsigned:N;"
// lines of a tracepoint format file into fields, by field name.
func parseFormat(sc *bufio.Scanner, fields map[string]tpField) error {
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "field:") {
			continue
		}
		var decl string
		f := tpField{offset: -1, size: -1}
		for _, part := range strings.Split(line, ";") {
			part = strings.TrimSpace(part)
			k, v, ok := strings.Cut(part, ":")
			if !ok {
				continue
			}
			switch k {
			case "field":
				decl = v
			case "offset":
				f.offset, _ = strconv.Atoi(v)
			case "size":
				f.size, _ = strconv.Atoi(v)
			}
		}
		if decl == "" || f.offset < 0 || f.size <= 0 {
			continue
		}
		name := decl[strings.LastIndexAny(decl, " *")+1:]
		if i := strings.IndexByte(name, '['); i >= 0 {
			name = name[:i]
		}
		f.ok = true
		fields[name] = f
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading format: %w", err)
	}
	if len(fields) == 0 {
		return errors.New("format has no fields")
	}
	return nil
}

// field returns the layout of a named field, or an error naming the tracepoint.
func (tp *tracepoint) field(name string) (tpField, error) {
	f, ok := tp.fields[name]
	if !ok {
		return tpField{}, fmt.Errorf("tracepoint %s:%s has no field %q", tp.system, tp.name, name)
	}
	return f, nil
}
