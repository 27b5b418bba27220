package nrm2

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// corpusShapes returns a small real trace and its damaged shapes, by name:
// truncation at every chunk boundary and inside every chunk, a corrupted
// record, bad chunk lengths, kinds and CPUs, a zero-filled tail.
func corpusShapes(t *testing.T) map[string][]byte {
	t.Helper()
	b := buildTrace(t, 2, 60, 2<<10)
	b.index(t)
	out := map[string][]byte{"good": b.data}
	for i, off := range b.chunks {
		out["cut-at-chunk-"+strconv.Itoa(i)] = b.data[:off]
		out["cut-in-chunk-"+strconv.Itoa(i)] = b.data[:off+ChunkHeaderSize+(b.ends[i]-off-ChunkHeaderSize)/2]
	}
	out["cut-in-chunk-header"] = b.data[:b.chunks[3]+9]
	mid := b.ticks[len(b.ticks)/2]
	out["corrupt-record"] = corrupt(b.data, mid.start)
	for name, field := range map[string]struct {
		at int64
		v  uint64
	}{
		"bad-length-huge":  {8, 1 << 40},
		"bad-length-long":  {8, 4096},
		"bad-length-short": {8, 8},
		"bad-kind":         {0, 9},
		"bad-cpu":          {4, 99},
	} {
		d := append([]byte(nil), b.data...)
		off := b.chunks[mid.chunk] + field.at
		if field.at == 8 {
			binary.LittleEndian.PutUint64(d[off:], field.v)
		} else {
			binary.LittleEndian.PutUint32(d[off:], uint32(field.v))
		}
		out[name] = d
	}
	// The kallsyms chunk as /proc/kallsyms has it, with odd lines.
	ks := []byte("ffffffff81000000 T _stext\nffffffff81000100 t do_thing [mymod]\n0000000000000000 A fixed_percpu_data\nnot a line\nffffffffc0001000 T\nffffffff81000200 T last_without_newline")
	var hdr [ChunkHeaderSize]byte
	binary.LittleEndian.PutUint32(hdr[0:], ChunkKallsyms)
	binary.LittleEndian.PutUint64(hdr[8:], uint64(len(ks)))
	odd := append(append(append([]byte(nil), b.data[:HeaderSize]...), hdr[:]...), ks...)
	odd = append(odd, make([]byte, (8-len(ks)%8)%8)...)
	out["kallsyms-odd"] = append(odd, b.data[b.ends[0]:]...)
	out["zero-tail"] = append(append([]byte(nil), b.data[:b.chunks[len(b.chunks)-3]]...), make([]byte, 4096)...)
	return out
}

const corpusDir = "testdata/fuzz/FuzzParse"

// TestFuzzCorpusIsCurrent checks that FuzzParse's seed corpus holds every
// shape of corpusShapes (PERFINSP_WRITE_CORPUS=1 writes them), and that the
// salvaging reader reads every shape but the header-less ones.
func TestFuzzCorpusIsCurrent(t *testing.T) {
	for name, data := range corpusShapes(t) {
		path := filepath.Join(corpusDir, name)
		text := []byte("go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n")
		if os.Getenv("PERFINSP_WRITE_CORPUS") == "1" {
			if err := os.MkdirAll(corpusDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, text, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		have, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(have, text) {
			t.Fatalf("%s is missing or stale (%v): run PERFINSP_WRITE_CORPUS=1 go test -run FuzzCorpus ./format/nrm2/", path, err)
		}
		if _, err := ParseWith(data, Options{Salvage: true}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}
