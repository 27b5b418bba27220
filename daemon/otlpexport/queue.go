// Package otlpexport delivers OTLP profiles to one collector endpoint over
// OTLP/HTTP or OTLP/gRPC. Enqueue never blocks: profiles wait in a queue
// bounded in bytes, then (with a spool directory) on disk in a bounded
// directory, and are sent oldest first, retried with exponential backoff
// while the endpoint is down; what the bounds cannot hold is dropped and
// counted.
package otlpexport

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// item is one marshalled export request (ExportProfilesServiceRequest).
type item struct {
	seq     uint64
	body    []byte // nil while it is on disk only
	samples int64
	spool   string // its spool file ("" : in memory)
	size    int64
}

// queue holds the items waiting to be sent: the oldest spilled to disk
// (spool, in order), then the newest in memory. Caller holds mu.
type queue struct {
	mem      []*item
	memBytes int64
	maxMem   int64

	dir       string // spool directory ("" : none)
	spool     []*item
	diskBytes int64
	maxDisk   int64

	next uint64 // sequence of the next item
}

// spoolName is the file of an item: sequence and sample count, so a spool
// found at start-up is sent in order and its drops are counted right.
func spoolName(seq uint64, samples int64) string {
	return fmt.Sprintf("%016x-%d.otlp", seq, samples)
}

// openSpool makes dir (mode 0700) and picks up the items an earlier run
// left in it. The directory must be the agent's own: a directory that
// another user owns or may write is refused.
func (q *queue) openSpool(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("spool directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("spool directory: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("spool directory %s must be a directory of uid %d that no other user may write (chmod 700 it)", dir, os.Geteuid())
	}
	q.dir = dir
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("spool directory: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		seqs, rest, ok := strings.Cut(strings.TrimSuffix(name, ".otlp"), "-")
		if !ok || !strings.HasSuffix(name, ".otlp") || !e.Type().IsRegular() {
			continue
		}
		seq, err1 := strconv.ParseUint(seqs, 16, 64)
		samples, err2 := strconv.ParseInt(rest, 10, 64)
		info, err3 := e.Info()
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		q.spool = append(q.spool, &item{seq: seq, samples: samples, spool: filepath.Join(dir, name), size: info.Size()})
		q.diskBytes += info.Size()
		q.next = max(q.next, seq+1)
	}
	sort.Slice(q.spool, func(i, j int) bool { return q.spool[i].seq < q.spool[j].seq })
	return nil
}

// push adds a new item; it returns the items that had to be dropped to
// keep within the bounds (the oldest first).
func (q *queue) push(body []byte, samples int64) (dropped []*item) {
	it := &item{seq: q.next, body: body, samples: samples, size: int64(len(body))}
	q.next++
	q.mem = append(q.mem, it)
	q.memBytes += it.size
	for q.memBytes > q.maxMem && len(q.mem) > 0 {
		old := q.mem[0]
		q.mem = q.mem[1:]
		q.memBytes -= old.size
		dropped = append(dropped, q.spill(old)...)
	}
	return dropped
}

// spill writes an item to the spool, dropping the oldest spooled items to
// make room; it returns what was dropped (it itself when it could not be
// spooled).
func (q *queue) spill(it *item) (dropped []*item) {
	if q.dir == "" || it.size > q.maxDisk {
		return []*item{it}
	}
	for q.diskBytes+it.size > q.maxDisk && len(q.spool) > 0 {
		old := q.spool[0]
		q.spool = q.spool[1:]
		q.diskBytes -= old.size
		_ = os.Remove(old.spool)
		dropped = append(dropped, old)
	}
	path := filepath.Join(q.dir, spoolName(it.seq, it.samples))
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return append(dropped, it)
	}
	_, werr := f.Write(it.body)
	cerr := f.Close()
	if werr != nil || cerr != nil || os.Rename(tmp, path) != nil {
		_ = os.Remove(tmp)
		return append(dropped, it)
	}
	it.spool, it.body = path, nil
	q.spool = append(q.spool, it)
	q.diskBytes += it.size
	return dropped
}

// head is the oldest item (nil: none), its body read from disk if spooled.
func (q *queue) head() (*item, error) {
	if len(q.spool) > 0 {
		it := q.spool[0]
		if it.body == nil {
			b, err := os.ReadFile(it.spool)
			if err != nil {
				return it, err
			}
			it.body = b
		}
		return it, nil
	}
	if len(q.mem) > 0 {
		return q.mem[0], nil
	}
	return nil, nil
}

// remove takes the item head returned off the queue (sent or rejected).
func (q *queue) remove(it *item) {
	if len(q.spool) > 0 && q.spool[0] == it {
		q.spool = q.spool[1:]
		q.diskBytes -= it.size
		_ = os.Remove(it.spool)
		it.body = nil
		return
	}
	if len(q.mem) > 0 && q.mem[0] == it {
		q.mem = q.mem[1:]
		q.memBytes -= it.size
	}
}

// dropSpoolBody releases the body of a spooled item read back but not
// sent: only the memory queue holds bodies between attempts.
func (q *queue) dropSpoolBody(it *item) {
	if it != nil && it.spool != "" {
		it.body = nil
	}
}

// len is the number of items waiting.
func (q *queue) len() int { return len(q.mem) + len(q.spool) }
