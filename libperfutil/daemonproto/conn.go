package daemonproto

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// MaxRequest caps one request or response line. A peer that sends more
// without a newline is cut off: the daemon never grows with a client's
// input.
const MaxRequest = 1 << 20

// MaxFiles is the most descriptors one message may carry.
const MaxFiles = 4

// ErrTooLarge is returned when a line exceeds MaxRequest.
var ErrTooLarge = fmt.Errorf("request larger than %d bytes", MaxRequest)

// Conn frames the protocol on a Unix stream socket: one JSON value per
// line, each optionally carrying open files (SCM_RIGHTS). Files travel
// with the line they were sent with: the sender opens them with its own
// rights, so the daemon never opens a path a client names.
type Conn struct {
	c       *net.UnixConn
	buf     []byte
	pending []*os.File
}

// NewConn wraps a connected Unix socket.
func NewConn(c *net.UnixConn) *Conn { return &Conn{c: c} }

// SetDeadline bounds the next Send and Receive.
func (c *Conn) SetDeadline(t time.Time) error { return c.c.SetDeadline(t) }

// Close closes the socket and any received files not handed out.
func (c *Conn) Close() error {
	closeFiles(c.pending)
	c.pending = nil
	return c.c.Close()
}

// Send writes v as one line, with files attached to it.
func (c *Conn) Send(v any, files ...*os.File) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	b = append(b, '\n')
	if len(b) > MaxRequest {
		return ErrTooLarge
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

// Receive reads the next line into v and returns the files that came with
// it (the caller closes them).
func (c *Conn) Receive(v any) ([]*os.File, error) {
	line, files, err := c.readLine()
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(line, v); err != nil {
		closeFiles(files)
		return nil, fmt.Errorf("bad message: %w", err)
	}
	return files, nil
}

func (c *Conn) readLine() ([]byte, []*os.File, error) {
	tmp := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4*MaxFiles))
	for {
		if i := bytes.IndexByte(c.buf, '\n'); i >= 0 {
			line := append([]byte(nil), c.buf[:i]...)
			c.buf = c.buf[i+1:]
			files := c.pending
			c.pending = nil
			return line, files, nil
		}
		if len(c.buf) > MaxRequest {
			return nil, nil, ErrTooLarge
		}
		n, oobn, err := c.recv(tmp, oob)
		if oobn > 0 {
			if ferr := c.takeFiles(oob[:oobn]); ferr != nil {
				return nil, nil, ferr
			}
		}
		if n > 0 {
			c.buf = append(c.buf, tmp[:n]...)
			continue
		}
		if err == nil {
			err = errors.New("connection closed")
		}
		return nil, nil, err
	}
}

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
		err = errors.New("connection closed")
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
