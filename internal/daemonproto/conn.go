package daemonproto

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// MaxRequest caps one request line or frame. A peer that sends more
// without a newline is cut off: the daemon never grows with a client's
// input.
const MaxRequest = 1 << 20

// MaxResponse caps one response line: a result the daemon builds (a PTT
// dump of thousands of threads) may be larger than any request. Clients
// read with Conn.MaxLine set to it.
const MaxResponse = 64 << 20

// FrameMagic begins a binary frame, the form of a request whose argument
// is raw bytes (a JSON line never begins with a NUL): FrameMagic, the op's
// length in one byte (1..MaxFrameOp), the op, the payload's length (u32
// little-endian, at most MaxRequest), the payload. It is answered with a
// JSON line, as a request line is. Only ops registered for frames take it.
const FrameMagic = 0

// MaxFrameOp bounds the op's name in a frame.
const MaxFrameOp = 32

// FrameHeader is the frame's header for op and a payload of n bytes.
func FrameHeader(op string, n int) []byte {
	h := make([]byte, 0, 6+len(op))
	h = append(h, FrameMagic, byte(len(op)))
	h = append(h, op...)
	return binary.LittleEndian.AppendUint32(h, uint32(n))
}

// MaxFiles is the most descriptors one message may carry.
const MaxFiles = 4

// ErrTooLarge is wrapped when a line or frame exceeds its bound (a
// received one Conn.MaxLine, a sent one MaxResponse).
var ErrTooLarge = errors.New("message too large")

// ErrPending is wrapped when a Budget refuses the bytes of a request not
// yet complete.
var ErrPending = errors.New("too many bytes of unfinished requests")

// Budget counts the bytes of unfinished requests a peer has made the
// reader hold (shared by all of one user's connections).
type Budget interface {
	// Take reserves n more bytes, or returns the error saying which limit
	// was reached (wrapping ErrPending).
	Take(n int) error
	// Give returns n bytes.
	Give(n int)
}

// Conn frames the protocol on a Unix stream socket: one JSON value per
// line, each optionally carrying open files (SCM_RIGHTS). Files travel
// with the line they were sent with: the sender opens them with its own
// rights, so the daemon never opens a path a client names.
type Conn struct {
	c       *net.UnixConn
	buf     []byte
	tmp     []byte
	pending []*os.File
	// reserved is the part of buf's capacity taken from the budget for
	// a frame's payload still to come (its bytes are not taken again as
	// they arrive).
	reserved int

	// RequestTimeout, when set, bounds the reading of one line once its
	// first byte has arrived (a peer may wait as long as it likes between
	// lines, not within one).
	RequestTimeout time.Duration
	// Budget, when set, counts the bytes of the unfinished line.
	Budget Budget
	// MaxLine bounds one received line or frame (0: MaxRequest).
	MaxLine int
}

// maxLine is the most one received line or frame may hold.
func (c *Conn) maxLine() int {
	if c.MaxLine > 0 {
		return c.MaxLine
	}
	return MaxRequest
}

// tooLarge is ErrTooLarge with the bound that was passed.
func tooLarge(limit int) error {
	return fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)
}

// NewConn wraps a connected Unix socket.
func NewConn(c *net.UnixConn) *Conn { return &Conn{c: c} }

// SetDeadline bounds the next Send and Receive.
func (c *Conn) SetDeadline(t time.Time) error { return c.c.SetDeadline(t) }

// Close closes the socket and any received files not handed out.
func (c *Conn) Close() error {
	closeFiles(c.pending)
	c.pending = nil
	c.drop(len(c.buf) + c.reserved)
	c.buf, c.reserved = nil, 0
	return c.c.Close()
}

// drop gives n buffered bytes back to the budget.
func (c *Conn) drop(n int) {
	if c.Budget != nil && n > 0 {
		c.Budget.Give(n)
	}
}

// Send writes v as one line, with files attached to it.
func (c *Conn) Send(v any, files ...*os.File) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	return c.SendLine(b, files...)
}

// SendLine writes b, one JSON value already encoded (without its
// newline), as Send writes one; b gets the newline appended.
func (c *Conn) SendLine(b []byte, files ...*os.File) error {
	b = append(b, '\n')
	if len(b) > MaxResponse {
		return tooLarge(MaxResponse)
	}
	if len(files) > MaxFiles {
		return fmt.Errorf("at most %d files per message", MaxFiles)
	}
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	n, _, err := c.c.WriteMsgUnix(b, oob, nil)
	if err != nil {
		return err
	}
	if n < len(b) {
		_, err = c.c.Write(b[n:])
	}
	return err
}

// SendFrame writes a binary frame of op and payload (FrameMagic).
func (c *Conn) SendFrame(op string, payload []byte) error {
	if len(op) == 0 || len(op) > MaxFrameOp {
		return fmt.Errorf("frame op %q: 1 to %d bytes", op, MaxFrameOp)
	}
	if len(payload) > MaxRequest {
		return tooLarge(MaxRequest)
	}
	_, err := c.c.Write(append(FrameHeader(op, len(payload)), payload...))
	return err
}

// Receive reads the next line into v and returns the files that came with
// it (the caller closes them). A binary frame (FrameMagic) is taken only
// into a *Request: its op and Payload.
func (c *Conn) Receive(v any) ([]*os.File, error) {
	line, frame, files, err := c.readMessage()
	if err != nil {
		return nil, err
	}
	if frame != nil {
		req, ok := v.(*Request)
		if !ok {
			closeFiles(files)
			return nil, errors.New("bad message: a binary frame where a JSON line was expected")
		}
		*req = Request{Op: frame.op, Payload: frame.payload}
		return files, nil
	}
	if err := json.Unmarshal(line, v); err != nil {
		closeFiles(files)
		return nil, fmt.Errorf("bad message: %w", err)
	}
	return files, nil
}

// frame is a binary frame received.
type frame struct {
	op      string
	payload []byte
}

// frameAt reads the frame at the start of c.buf: its length (0 until the
// header is complete), the frame once all of it is there.
func (c *Conn) frameAt() (int, *frame, error) {
	if len(c.buf) < 2 {
		return 0, nil, nil
	}
	n := int(c.buf[1])
	if n == 0 || n > MaxFrameOp {
		return 0, nil, fmt.Errorf("bad frame: an op of %d bytes (1 to %d)", n, MaxFrameOp)
	}
	if len(c.buf) < 2+n+4 {
		return 0, nil, nil
	}
	size := binary.LittleEndian.Uint32(c.buf[2+n:])
	if int64(size) > int64(c.maxLine()) {
		return 0, nil, tooLarge(c.maxLine())
	}
	total := 2 + n + 4 + int(size)
	if len(c.buf) < total {
		if cap(c.buf) < total {
			// one allocation for the payload still to come, taken
			// from the budget now: a header alone must not make the
			// reader hold a megabyte
			if err := c.reserve(total - len(c.buf)); err != nil {
				return 0, nil, err
			}
			c.buf = append(make([]byte, 0, total), c.buf...)
		}
		return total, nil, nil
	}
	f := &frame{op: string(c.buf[2 : 2+n])}
	if total == len(c.buf) {
		f.payload = c.buf[2+n+4 : total : total] // the buffer is the frame's: not copied
	} else {
		f.payload = append([]byte{}, c.buf[2+n+4:total]...)
	}
	return total, f, nil
}

// maxSlack is the most memory the buffer's array keeps past the bytes it
// holds once a message is taken out of it.
const maxSlack = 64 << 10

// take removes the first n bytes of the buffer. A large request's memory
// is not kept: what is left of the buffer (the start of the next message)
// moves out of a large array, so the memory a connection holds stays what
// its budget counts.
func (c *Conn) take(n int) {
	c.drop(n)
	array := cap(c.buf)
	c.buf = c.buf[n:]
	switch {
	case len(c.buf) == 0:
		c.buf = nil
	case array-len(c.buf) > maxSlack:
		c.buf = append([]byte(nil), c.buf...)
	}
}

// reserve takes n bytes still to come from the budget.
func (c *Conn) reserve(n int) error {
	if c.Budget != nil {
		if err := c.Budget.Take(n); err != nil {
			return err
		}
	}
	c.reserved += n
	return nil
}

// arrived counts n bytes received against the budget: those a frame
// reserved first, then more.
func (c *Conn) arrived(n int) error {
	k := min(n, c.reserved)
	if c.Budget != nil && n > k {
		if err := c.Budget.Take(n - k); err != nil {
			return err // (the bytes are not kept: reserved stays)
		}
	}
	c.reserved -= k
	return nil
}

// readMessage reads the next line, or binary frame, and the files that
// came with it.
func (c *Conn) readMessage() ([]byte, *frame, []*os.File, error) {
	if c.tmp == nil {
		c.tmp = make([]byte, 16<<10)
	}
	oob := make([]byte, unix.CmsgSpace(4*MaxFiles))
	armed := false
	scanned := 0 // bytes of a line already without a newline
	for {
		if len(c.buf) > 0 && c.buf[0] == FrameMagic {
			total, f, err := c.frameAt()
			if err != nil {
				return nil, nil, nil, err
			}
			if f != nil {
				c.take(total)
				files := c.pending
				c.pending = nil
				return nil, f, files, nil
			}
		} else if i := bytes.IndexByte(c.buf[scanned:], '\n'); i >= 0 {
			i += scanned
			line := append([]byte(nil), c.buf[:i]...)
			c.take(i + 1)
			files := c.pending
			c.pending = nil
			return line, nil, files, nil
		} else if scanned = len(c.buf); scanned > c.maxLine() {
			return nil, nil, nil, tooLarge(c.maxLine())
		}
		if len(c.buf) > 0 && !armed && c.RequestTimeout > 0 {
			_ = c.c.SetReadDeadline(time.Now().Add(c.RequestTimeout))
			armed = true
		}
		n, oobn, err := c.recv(c.tmp, oob)
		if oobn > 0 {
			if ferr := c.takeFiles(oob[:oobn]); ferr != nil {
				return nil, nil, nil, ferr
			}
		}
		if n > 0 {
			if berr := c.arrived(n); berr != nil {
				return nil, nil, nil, berr
			}
			c.buf = append(c.buf, c.tmp[:n]...)
			continue
		}
		if err == nil {
			err = ErrClosed
		}
		return nil, nil, nil, err
	}
}

// ErrClosed is a read that found the connection closed by its peer.
var ErrClosed = errors.New("connection closed")

// recv reads with MSG_CMSG_CLOEXEC so received descriptors never leak into
// a child process.
func (c *Conn) recv(p, oob []byte) (n, oobn int, err error) {
	raw, err := c.c.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var rerr error
	err = raw.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), p, oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	if n == 0 && oobn == 0 && err == nil {
		err = ErrClosed
	}
	return n, oobn, err
}

func (c *Conn) takeFiles(oob []byte) error {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return fmt.Errorf("bad control message: %w", err)
	}
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			c.pending = append(c.pending, os.NewFile(uintptr(fd), "passed"))
		}
	}
	if len(c.pending) > MaxFiles {
		closeFiles(c.pending)
		c.pending = nil
		return fmt.Errorf("more than %d files in one message", MaxFiles)
	}
	return nil
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}
