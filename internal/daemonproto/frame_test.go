package daemonproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// countBudget counts the bytes taken and not given back.
type countBudget struct{ held, most int }

func (b *countBudget) Take(n int) error {
	b.held += n
	b.most = max(b.most, b.held)
	return nil
}

func (b *countBudget) Give(n int) { b.held -= n }

// Binary frames and lines arrive in the order sent, a frame's payload as it
// was written (newlines and NULs in it), with the budget given back.
func TestConnFrames(t *testing.T) {
	a, b, err := pair()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	budget := &countBudget{}
	b.Budget = budget
	payload := make([]byte, 200<<10)
	for i := range payload {
		payload[i] = byte(i * 7) // every byte value, '\n' and 0 among them
	}
	go func() {
		_ = a.Send(&Request{Op: "ping"})
		_ = a.SendFrame("jprof", payload)
		_ = a.SendFrame("jprof", nil)
		_ = a.Send(&Request{Op: "info"})
	}()
	_ = b.SetDeadline(time.Now().Add(30 * time.Second))
	var got []string
	for range 4 {
		var req Request
		if _, err := b.Receive(&req); err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, req.Op)
		switch len(got) {
		case 2:
			if !bytes.Equal(req.Payload, payload) {
				t.Fatalf("the frame's payload: %d bytes, not the %d sent", len(req.Payload), len(payload))
			}
		case 3:
			if req.Payload == nil || len(req.Payload) != 0 {
				t.Fatalf("an empty frame's payload: %v (want empty, not nil)", req.Payload)
			}
		default:
			if req.Payload != nil {
				t.Fatalf("a line %q came with a payload", req.Op)
			}
		}
	}
	if strings.Join(got, ",") != "ping,jprof,jprof,info" {
		t.Fatalf("received %q", got)
	}
	if budget.held != 0 || budget.most < len(payload) {
		t.Fatalf("budget: %d bytes still held, at most %d (the frame is %d)", budget.held, budget.most, len(payload))
	}
}

// A frame's header is checked before its payload is read: a length past
// MaxRequest or an op of 0 or more than MaxFrameOp bytes ends the
// connection's reading; a frame read where no Request is wanted is a bad
// message.
func TestConnFrameLimits(t *testing.T) {
	for _, c := range []struct {
		name string
		head []byte
		want string
	}{
		{"too long", binary.LittleEndian.AppendUint32([]byte{FrameMagic, 1, 'x'}, MaxRequest+1), ErrTooLarge.Error()},
		{"no op", []byte{FrameMagic, 0, 0, 0, 0, 0}, "an op of 0 bytes"},
		{"long op", append([]byte{FrameMagic, MaxFrameOp + 1}, bytes.Repeat([]byte{'a'}, MaxFrameOp+5)...), "an op of 33 bytes"},
	} {
		a, b, err := pair()
		if err != nil {
			t.Fatal(err)
		}
		budget := &countBudget{}
		b.Budget = budget
		if _, err := a.c.Write(c.head); err != nil {
			t.Fatal(err)
		}
		_ = b.SetDeadline(time.Now().Add(30 * time.Second))
		var req Request
		_, err = b.Receive(&req)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
		if budget.most > 64 {
			t.Errorf("%s: %d bytes held", c.name, budget.most)
		}
		a.Close()
		b.Close()
	}
	if err := (&Conn{}).SendFrame(strings.Repeat("a", MaxFrameOp+1), nil); err == nil {
		t.Error("SendFrame took a 33-byte op")
	}

	a, b, err := pair()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	go func() { _ = a.SendFrame("jprof", []byte("x")) }()
	_ = b.SetDeadline(time.Now().Add(30 * time.Second))
	var resp Response
	if _, err := b.Receive(&resp); err == nil || !strings.HasPrefix(err.Error(), "bad message") {
		t.Fatalf("a frame read as a Response: %v", err)
	}
}

// limitBudget refuses past limit bytes held.
type limitBudget struct{ held, limit int }

func (b *limitBudget) Take(n int) error {
	if b.held+n > b.limit {
		return fmt.Errorf("%w: %d held, %d more asked", ErrPending, b.held, n)
	}
	b.held += n
	return nil
}

func (b *limitBudget) Give(n int) { b.held -= n }

// A frame's header takes its payload from the budget at once, before the
// payload comes: the reader allocates the payload when the header is
// read, and a header alone (on many connections) must not make it hold
// more than the budget allows. The budget is given back whole at Close.
func TestFrameHeaderTakesItsPayload(t *testing.T) {
	a, b, err := pair()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	budget := &limitBudget{limit: 64 << 10}
	b.Budget = budget
	if _, err := a.c.Write(FrameHeader("jprof", MaxRequest)); err != nil {
		t.Fatal(err)
	}
	_ = a.c.CloseWrite() // nothing more: a reader waiting for the payload sees the end
	_ = b.SetDeadline(time.Now().Add(30 * time.Second))
	var req Request
	if _, err := b.Receive(&req); !errors.Is(err, ErrPending) {
		t.Errorf("a header announcing %d bytes with a budget of %d: %v, want the budget's refusal", MaxRequest, budget.limit, err)
	}
	b.Close()
	if budget.held != 0 {
		t.Errorf("%d bytes still held after Close", budget.held)
	}

	// A frame that fits: reserved at its header, its bytes not counted
	// twice as they arrive, all given back once taken.
	a, b, err = pair()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	budget = &limitBudget{limit: MaxRequest + 64<<10}
	b.Budget = budget
	go func() { _ = a.SendFrame("jprof", make([]byte, MaxRequest)) }()
	_ = b.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := b.Receive(&req); err != nil || len(req.Payload) != MaxRequest {
		t.Fatalf("a frame of %d bytes with a budget of %d: %d bytes, %v", MaxRequest, budget.limit, len(req.Payload), err)
	}
	if budget.held != 0 {
		t.Errorf("%d bytes still held after the frame", budget.held)
	}
}

// What is left in the buffer once a large message is taken (the start of
// the next) does not keep the large message's array.
func TestTakeKeepsNoLargeArray(t *testing.T) {
	array := make([]byte, MaxRequest+1)
	c := &Conn{buf: array}
	c.take(MaxRequest)
	if len(c.buf) != 1 || &c.buf[0] == &array[MaxRequest] {
		t.Errorf("after a message of %d bytes, 1 left: the buffer holds %d bytes, in the message's array: %v", MaxRequest, len(c.buf), len(c.buf) == 1 && &c.buf[0] == &array[MaxRequest])
	}
	// a small message's buffer is kept (no copy per line)
	array = make([]byte, 200)
	c = &Conn{buf: array}
	c.take(100)
	if &c.buf[0] != &array[100] {
		t.Error("the rest of a small buffer was copied")
	}
}
