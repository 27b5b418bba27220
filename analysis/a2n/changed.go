package a2n

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A trace records the paths of the files mapped, and (MTE_FILE) the
// device and inode each was; not what they held. A module rebuilt after
// it was mapped (a binary rebuilt before post runs, a library a package
// upgrade replaced while a long trace ran) is named from the file as it
// is now, which may not be the code traced. Problems says so for each
// module read whose file
//   - is another inode of the same device than the one the trace mapped:
//     the file was replaced (a rename over it, as package managers and
//     linkers do, whatever modification time the new file has), or, when
//     its ctime (which a rename sets) is older than the mapping, the
//     process saw another file by that path (a container, a chroot);
//   - or was modified (its mtime) after its first mapping in the trace.
//
// Not its ctime, which a new hard link or a chmod changes too. A file of
// another device than the one mapped is not compared by inode: the same
// file has another device number on another boot (btrfs subvolumes,
// network file systems) or seen through overlayfs, whose mappings name
// the layer's file.

type fileID struct {
	major, minor uint32
	ino          uint64
}

// mappedAt notes that path was mapped at wall time ns (the first time
// counts).
func (c *Cache) mappedAt(path string, ns int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mapped == nil {
		c.mapped = map[string]int64{}
	}
	if _, ok := c.mapped[path]; !ok {
		c.mapped[path] = ns
	}
}

// mappedFileIs notes the file path was when the trace mapped it (the
// first time counts).
func (c *Cache) mappedFileIs(path string, id fileID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mappedFile == nil {
		c.mappedFile = map[string]fileID{}
	}
	if _, ok := c.mappedFile[path]; !ok {
		c.mappedFile[path] = id
	}
}

// changedSinceMapped is the warning for module m when its file was
// replaced or changed after its first mapping ("": it was not, or it is
// not known). Called with c.mu held.
func (c *Cache) changedSinceMapped(m *Module) string {
	if m.Err != nil || m.file == "" || c.Root != "" { // (another machine's files: copied since)
		return ""
	}
	fi, err := os.Stat(m.file)
	if err != nil {
		return ""
	}
	if was, ok := c.mappedFile[m.Path]; ok {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			now := fileID{unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino}
			if now.major == was.major && now.minor == was.minor && now.ino != was.ino {
				if at, ok := c.mapped[m.Path]; ok && st.Ctim.Nano() <= at {
					// Not replaced since (a rename sets the file's
					// ctime): the process saw another file by
					// that path.
					return fmt.Sprintf("%s is another file (inode %d) than the one the trace mapped (inode %d), here since before the trace mapped it: the process saw another file by that path (in a container or a chroot: post --root DIR reads the files under that root); its names are this file's, which may not be the code traced",
						m.Path, now.ino, was.ino)
				}
				return fmt.Sprintf("%s was replaced after the trace mapped it (inode %d then, %d now): its names are the new file's, which may not be the code traced",
					m.Path, was.ino, now.ino)
			}
		}
	}
	at, ok := c.mapped[m.Path]
	if !ok {
		return ""
	}
	changed := fi.ModTime().UnixNano()
	if changed <= at {
		return ""
	}
	return fmt.Sprintf("%s changed at %s, after the trace mapped it (%s): its names are the file's as it is now, which may not be the code traced",
		m.Path, time.Unix(0, changed).UTC().Format(time.RFC3339), time.Unix(0, at).UTC().Format(time.RFC3339))
}
