package daemonclient

import (
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// noticeFunc is a writer that calls f with what is written.
type noticeFunc func(string)

func (f noticeFunc) Write(b []byte) (int, error) { f(string(b)); return len(b), nil }

// An agent slow to open its socket is waited for past the notice, and
// the caller is told; one that exits, or never opens it within the bound,
// is an error that names its log.
func TestWaitSocket(t *testing.T) {
	defer func(w, n time.Duration) { startWait, startNotice = w, n }(startWait, startNotice)
	defer func(w io.Writer) { noticeTo = w }(noticeTo)
	dir := t.TempDir()
	path := filepath.Join(dir, "a.sock")
	log := filepath.Join(dir, "a.log")

	// Opens its socket only once the notice is out.
	startWait, startNotice = time.Minute, 0
	var ln net.Listener
	var notice string
	noticeTo = noticeFunc(func(s string) {
		notice = s
		var err error
		if ln, err = net.Listen("unix", path); err != nil {
			t.Error(err)
		}
	})
	if err := waitSocket(path, log, make(chan error)); err != nil || ln == nil {
		t.Fatalf("an agent opening its socket after the notice: %v", err)
	}
	ln.Close()
	if !strings.Contains(notice, "waiting for pitraced to open "+path) || !strings.Contains(notice, log) {
		t.Errorf("notice %q names neither the socket nor the log", notice)
	}

	// Exits at start.
	noticeTo = noticeFunc(func(string) {})
	exited := make(chan error, 1)
	exited <- errors.New("exit status 1")
	if err := waitSocket(filepath.Join(dir, "b.sock"), log, exited); err == nil || !strings.Contains(err.Error(), "exited at start") || !strings.Contains(err.Error(), log) {
		t.Errorf("an agent that exits: %v", err)
	}

	// Never opens it.
	startWait = 0
	if err := waitSocket(filepath.Join(dir, "c.sock"), log, make(chan error)); err == nil || !strings.Contains(err.Error(), "did not open") || !strings.Contains(err.Error(), log) {
		t.Errorf("an agent that never opens its socket: %v", err)
	}
}
