package itrace

import (
	"encoding/json"
	"net"
	"path/filepath"
	"testing"
	"time"

	"perfinsp/internal/daemonproto"
	"perfinsp/libperfutil/control"
)

// ITrace requests wait on traced threads, so they get the client's long
// time limit: against a daemon that answers ping at once and itrace-off
// after 400 ms, Off succeeds with the quick limit at 100 ms.
func TestITraceRequestsUseTheLongTimeLimit(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "pitraced.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan string, 4)
	go func() {
		uc, err := l.AcceptUnix()
		if err != nil {
			return
		}
		defer uc.Close()
		c := daemonproto.NewConn(uc)
		for {
			var req daemonproto.Request
			if _, err := c.Receive(&req); err != nil {
				return
			}
			got <- req.Op
			resp := daemonproto.Response{OK: true}
			switch req.Op {
			case daemonproto.OpPing:
				resp.Result, _ = json.Marshal(daemonproto.PingResult{})
			case OpOff:
				time.Sleep(400 * time.Millisecond)
				resp.Result, _ = json.Marshal(OffResult{})
			}
			if err := c.Send(&resp); err != nil {
				return
			}
		}
	}()
	t.Setenv(daemonproto.EnvSocket, sock)
	t.Setenv("PERFINSP_TIMEOUT", "100ms")
	t.Setenv(control.EnvBackend, "daemon")
	if _, err := Off(OffArgs{PIDs: []int{1}}); err != nil {
		t.Fatalf("itrace off with a daemon answering in 400 ms: %v", err)
	}
	if op1, op2 := <-got, <-got; op1 != daemonproto.OpPing || op2 != OpOff {
		t.Fatalf("requests %s, %s; want ping, %s", op1, op2, OpOff)
	}
}
