// Package traceevent writes Chrome's trace-event JSON (the "JSON Object
// Format" of the Trace Event Format document), which both the Perfetto UI
// (ui.perfetto.dev) and chrome://tracing open.
//
// The writer streams: events are written as they are given, in any order
// across tracks (both viewers sort them), begin/end pairs of one track in
// the order they happened. Stack frames (the "stackFrames" dictionary,
// referred to by an event's "sf") are kept and written at the end.
// Times are nanoseconds on the trace's clock, written as microseconds
// from Origin with three decimals (exact to the nanosecond).
package traceevent

import (
	"bufio"
	"io"
	"strconv"
	"unicode/utf8"

	"perfinsp/format/internal/calltree"
)

// Writer writes one trace-event JSON document.
type Writer struct {
	w      *bufio.Writer
	origin uint64
	n      int // events written
	frames calltree.Tree
	// The names of frames, by id (Name): each as a JSON string, unquoted,
	// in quoted[at[id]:at[id+1]]. Frames and their map hold no pointers
	// (a system-wide time line makes hundreds of thousands): the
	// collector does not scan them.
	names  map[string]int32
	quoted []byte
	at     []int
	buf    []byte // the event being made
	path   []int32
}

// Arg is one argument of an event: a string, or a number when Str is
// empty and IsNum is set.
type Arg struct {
	Key   string
	Str   string
	Num   uint64
	IsNum bool
}

// Str is a string argument.
func Str(k, v string) Arg { return Arg{Key: k, Str: v} }

// Num is a numeric argument.
func Num(k string, v uint64) Arg { return Arg{Key: k, Num: v, IsNum: true} }

// New starts a document on out; origin is the time written as 0.
func New(out io.Writer, origin uint64) *Writer {
	w := &Writer{w: bufio.NewWriterSize(out, 1<<20), origin: origin, names: map[string]int32{}, at: []int{0}}
	w.w.WriteString(`{"displayTimeUnit":"ns","traceEvents":[`)
	return w
}

// Origin is the time written as 0.
func (w *Writer) Origin() uint64 { return w.origin }

// appendQuoted appends s as the inside of a JSON string, as
// encoding/json writes it (HTML's <, > and & escaped, an invalid UTF-8
// byte as U+FFFD, U+2028 and U+2029 escaped): valid UTF-8 out, whatever
// the bytes in, without encoding/json's reflection and allocation per
// string (a time line writes millions).
func appendQuoted(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= ' ' && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(dst, s[start:]...)
}

// Each event is made in the writer's buffer (buf) by appends and
// written to the bufio.Writer at once: a sample's event has dozens of
// parts (its stack's names), each a call of the bufio.Writer otherwise.

func appendStr(b []byte, s string) []byte {
	b = append(b, '"')
	return append(appendQuoted(b, s), '"')
}

// appendTs appends t as microseconds from the origin (negative before it).
func (w *Writer) appendTs(b []byte, t uint64) []byte {
	d := int64(t - w.origin)
	if d < 0 {
		b = append(b, '-')
		d = -d
	}
	return appendUs(b, uint64(d))
}

// appendUs appends d nanoseconds as microseconds.
func appendUs(b []byte, d uint64) []byte {
	b = strconv.AppendUint(b, d/1000, 10)
	return append(b, '.', byte('0'+d/100%10), byte('0'+d/10%10), byte('0'+d%10))
}

// head starts an event in the buffer: its phase, track, and name and
// category when given.
func (w *Writer) head(ph byte, pid, tid uint32, cat, name string) []byte {
	b := w.buf[:0]
	if w.n > 0 {
		b = append(b, ",\n"...)
	} else {
		b = append(b, '\n')
	}
	w.n++
	b = append(b, `{"ph":"`...)
	b = append(b, ph)
	b = append(b, `","pid":`...)
	b = strconv.AppendUint(b, uint64(pid), 10)
	b = append(b, `,"tid":`...)
	b = strconv.AppendUint(b, uint64(tid), 10)
	if name != "" {
		b = append(b, `,"name":`...)
		b = appendStr(b, name)
	}
	if cat != "" {
		b = append(b, `,"cat":`...)
		b = appendStr(b, cat)
	}
	return b
}

// tail ends the event in b with its args and writes it.
func (w *Writer) tail(b []byte, args []Arg) {
	b = appendArgs(b, args)
	w.write(append(b, '}'))
}

// write writes the event b (made in the buffer), keeping the buffer.
func (w *Writer) write(b []byte) {
	w.buf = b
	w.w.Write(b)
}

func appendArgs(b []byte, args []Arg) []byte {
	if len(args) > 0 {
		b = append(b, `,"args":{`...)
		for i, a := range args {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendArg(b, a)
		}
		b = append(b, '}')
	}
	return b
}

func appendArg(b []byte, a Arg) []byte {
	b = appendStr(b, a.Key)
	b = append(b, ':')
	if a.IsNum && a.Str == "" {
		return strconv.AppendUint(b, a.Num, 10)
	}
	return appendStr(b, a.Str)
}

// ProcessName names process pid's track group.
func (w *Writer) ProcessName(pid uint32, name string) {
	w.tail(w.head('M', pid, pid, "", "process_name"), []Arg{Str("name", name)})
}

// ThreadName names the track (pid, tid).
func (w *Writer) ThreadName(pid, tid uint32, name string) {
	w.tail(w.head('M', pid, tid, "", "thread_name"), []Arg{Str("name", name)})
}

// Complete writes a slice from start to end ("X").
func (w *Writer) Complete(pid, tid uint32, cat, name string, start, end uint64, args ...Arg) {
	b := w.head('X', pid, tid, cat, name)
	b = append(b, `,"ts":`...)
	b = w.appendTs(b, start)
	b = append(b, `,"dur":`...)
	b = appendUs(b, end-start)
	w.tail(b, args)
}

// Begin opens a slice on (pid, tid) at t ("B"); End closes the innermost.
func (w *Writer) Begin(pid, tid uint32, cat, name string, t uint64, args ...Arg) {
	b := w.head('B', pid, tid, cat, name)
	b = append(b, `,"ts":`...)
	b = w.appendTs(b, t)
	w.tail(b, args)
}

// End closes the innermost open slice of (pid, tid) at t ("E"); its args
// are added to the slice's.
func (w *Writer) End(pid, tid uint32, t uint64, args ...Arg) {
	b := w.head('E', pid, tid, "", "")
	b = append(b, `,"ts":`...)
	b = w.appendTs(b, t)
	w.tail(b, args)
}

// Instant writes a thread-scoped instant event at t with the stack sf (a
// Frame; 0: none).
func (w *Writer) Instant(pid, tid uint32, cat, name string, t uint64, sf int, args ...Arg) {
	b := w.head('i', pid, tid, cat, name)
	b = append(b, `,"s":"t","ts":`...)
	b = w.appendTs(b, t)
	if sf > 0 {
		b = append(b, `,"sf":`...)
		b = strconv.AppendUint(b, uint64(sf), 10)
	}
	w.tail(b, args)
}

// InstantStack is Instant with the stack sf also as the argument "stack"
// (its frames' names root first, separated by ';'), after args: for
// viewers that read no stackFrames (Perfetto's JSON importer).
func (w *Writer) InstantStack(pid, tid uint32, cat, name string, t uint64, sf int, args ...Arg) {
	b := w.head('i', pid, tid, cat, name)
	b = append(b, `,"s":"t","ts":`...)
	b = w.appendTs(b, t)
	if sf > 0 {
		b = append(b, `,"sf":`...)
		b = strconv.AppendUint(b, uint64(sf), 10)
	}
	b = append(b, `,"args":{`...)
	for _, a := range args {
		b = appendArg(b, a)
		b = append(b, ',')
	}
	b = append(b, `"stack":"`...)
	w.path = w.path[:0]
	for id := int32(sf); id > 0 && int(id) <= w.frames.Len(); id = w.frames.Frame(id).Parent {
		w.path = append(w.path, w.frames.Frame(id).Name)
	}
	for i := len(w.path) - 1; i >= 0; i-- {
		b = append(b, w.quotedName(w.path[i])...)
		if i > 0 {
			b = append(b, ';')
		}
	}
	w.write(append(b, `"}}`...))
}

// Frame returns the id of the stack frame name (category: its module)
// called from parent (0: a root frame): the stack whose leaf it is.
func (w *Writer) Frame(parent int, name, category string) int {
	return w.FrameOf(parent, w.Name(name), w.Name(category))
}

// Name is the id of the string s among the names of frames.
func (w *Writer) Name(s string) int32 {
	id, ok := w.names[s]
	if !ok {
		id = int32(len(w.at) - 1)
		w.names[s] = id
		w.quoted = appendQuoted(w.quoted, s)
		w.at = append(w.at, len(w.quoted))
	}
	return id
}

func (w *Writer) quotedName(id int32) []byte { return w.quoted[w.at[id]:w.at[id+1]] }

// FrameOf is Frame with the name and category given by their ids (Name):
// for a caller that names its frames once.
func (w *Writer) FrameOf(parent int, name, category int32) int {
	return int(w.frames.Of(int32(parent), name, category))
}

// Close ends the document (the stack frames after the events) and
// flushes it; the error is the first the writing met.
func (w *Writer) Close() error {
	w.w.WriteString("\n]")
	if w.frames.Len() > 0 {
		w.w.WriteString(`,"stackFrames":{`)
		for i := range w.frames.Len() {
			f := w.frames.Frame(int32(i + 1))
			if i > 0 {
				w.w.WriteString(",\n")
			} else {
				w.w.WriteByte('\n')
			}
			w.w.WriteByte('"')
			w.w.Write(strconv.AppendUint(w.buf[:0], uint64(i+1), 10))
			w.w.WriteString(`":{"name":"`)
			w.w.Write(w.quotedName(f.Name))
			w.w.WriteByte('"')
			if c := w.quotedName(f.Mod); len(c) > 0 { // (only "" quotes to nothing)
				w.w.WriteString(`,"category":"`)
				w.w.Write(c)
				w.w.WriteByte('"')
			}
			if f.Parent > 0 {
				w.w.WriteString(`,"parent":"`)
				w.w.Write(strconv.AppendUint(w.buf[:0], uint64(f.Parent), 10))
				w.w.WriteByte('"')
			}
			w.w.WriteByte('}')
		}
		w.w.WriteString("\n}")
	}
	w.w.WriteString("}\n")
	return w.w.Flush()
}
