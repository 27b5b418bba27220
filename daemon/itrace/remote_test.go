package itrace

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// TestHelperEndCrossingAStop: a helper that ends by itself (its process
// exited) while the daemon's stop request is on its way closes its socket
// with that request unread, and the daemon's next read after the helper's
// end message is ECONNRESET, not an end of file. The session ended well:
// no error, its figures kept.
func TestHelperEndCrossingAStop(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn, helper := os.NewFile(uintptr(fds[0]), "daemon"), os.NewFile(uintptr(fds[1]), "helper")
	proc := exec.Command("true")
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	end, _ := json.Marshal(endMsg{Stats: Stats{Instructions: 1234, Records: 56}})
	if _, err := helper.Write(appendFrame(nil, frameEnd, end)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(appendFrame(nil, frameStop, nil)); err != nil { // the stop, unread
		t.Fatal(err)
	}
	helper.Close()
	rm := &remote{proc: proc.Process, conn: conn, sink: &capture{}, done: make(chan struct{}), attached: make(chan attachMsg, 1)}
	rm.read(bufio.NewReader(conn))
	if err := rm.Err(); err != nil {
		t.Fatalf("a helper that ended with a stop unread: %v", err)
	}
	if st := rm.Stats(); st.Instructions != 1234 || st.Records != 56 {
		t.Fatalf("stats %+v: want the end message's", st)
	}
}
