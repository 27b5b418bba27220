package daemonproto

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"perfinsp/internal/testenv"
)

// CheckAgentDir against the directories another user could have made or
// can write, and the links on the way.
func TestCheckAgentDir(t *testing.T) {
	testenv.NeedRoot(t, "to make directories of another user")
	top := t.TempDir()
	mk := func(name string, mode os.FileMode, uid int) string {
		p := filepath.Join(top, name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := mk("good", 0o755, 0)
	sticky := mk("sticky", os.ModeSticky|0o777, 0)
	inSticky := mk("sticky/roots", 0o755, 0)
	worldw := mk("worldw", 0o777, 0)
	underWorld := mk("worldw/roots", 0o755, 0)
	nobodys := mk("nobodys", 0o755, 65534)
	underNobody := mk("nobodys/roots", 0o755, 0)
	linkToGood := filepath.Join(top, "link-good")
	if err := os.Symlink(good, linkToGood); err != nil {
		t.Fatal(err)
	}
	linkByNobody := filepath.Join(sticky, "link-nobody")
	if err := os.Symlink(good, linkByNobody); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(linkByNobody, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir   string
		owner int
		ok    bool
	}{
		{good, 0, true},
		{inSticky, 0, true},      // a sticky ancestor, like /tmp
		{sticky, 0, false},       // the directory itself writable by others
		{worldw, 0, false},       // writable by others
		{underWorld, 0, false},   // its parent: the directory can be renamed away
		{nobodys, 0, false},      // another user's
		{underNobody, 0, false},  // under another user's
		{nobodys, 65534, true},   // the user's own agent
		{linkToGood, 0, true},    // a link root made, to a good directory
		{linkByNobody, 0, false}, // a link another user made
	} {
		err := CheckAgentDir(c.dir, c.owner)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrUnsafeDir)) {
			t.Errorf("CheckAgentDir(%s, %d) = %v, want ok %v", c.dir, c.owner, err, c.ok)
		}
	}
	// A directory not made yet: its nearest existing ancestor decides.
	if err := CheckAgentPath(filepath.Join(inSticky, "new", "dir"), 0); err != nil {
		t.Errorf("CheckAgentPath under a good directory: %v", err)
	}
	if err := CheckAgentPath(filepath.Join(worldw, "new"), 0); err == nil {
		t.Error("CheckAgentPath under a world-writable directory accepted")
	}
}

// A state file another user wrote, or a link in its place, is not read;
// WriteState never writes through a link planted at its temporary name.
func TestStateFileOwnership(t *testing.T) {
	testenv.NeedRoot(t, "to make files of another user")
	dir := t.TempDir()
	sock := filepath.Join(dir, "pitraced.sock")
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, StatePath(sock)+".tmp"); err != nil {
		t.Fatal(err)
	}
	if err := WriteState(sock, &State{PID: 4242, State: "on", Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "secret" {
		t.Fatalf("WriteState wrote through the link: %q", b)
	}
	if st := ReadState(sock, 0); st == nil || st.PID != 4242 {
		t.Fatalf("root's own state file: %+v", st)
	}
	if err := os.Chown(StatePath(sock), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if st := ReadState(sock, 0); st != nil {
		t.Fatalf("a state file of uid 65534 was read: %+v", st)
	}
	if err := os.Remove(StatePath(sock)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, StatePath(sock)); err != nil {
		t.Fatal(err)
	}
	if st := ReadState(sock, 0); st != nil {
		t.Fatalf("a link in the state file's place was followed: %+v", st)
	}
}
