package a2n

import (
	"fmt"
	"os"
	"time"
)

// A trace records the paths of the files mapped, not what they held: a
// module rebuilt after it was mapped (a binary rebuilt before post runs,
// a tool replaced while a long trace ran) is named from the file as it
// is now, which may not be the code traced. Problems says so for each
// module read whose file was modified (its mtime) after its first
// mapping in the trace. (Not its ctime, which a new hard link or a
// chmod changes too; a file replaced by one of an older mtime — dpkg
// keeps a package's — goes unnoticed.)

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

// changedSinceMapped is the warning for module m when its file changed
// after its first mapping ("": it did not, or it is not known). Called
// with c.mu held.
func (c *Cache) changedSinceMapped(m *Module) string {
	at, ok := c.mapped[m.Path]
	if !ok || m.Err != nil || m.file == "" || c.Root != "" { // (another machine's files: copied since)
		return ""
	}
	fi, err := os.Stat(m.file)
	if err != nil {
		return ""
	}
	changed := fi.ModTime().UnixNano()
	if changed <= at {
		return ""
	}
	return fmt.Sprintf("%s changed at %s, after the trace mapped it (%s): its names are the file's as it is now, which may not be the code traced",
		m.Path, time.Unix(0, changed).UTC().Format(time.RFC3339), time.Unix(0, at).UTC().Format(time.RFC3339))
}
