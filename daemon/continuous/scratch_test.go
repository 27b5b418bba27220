package continuous

import (
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"perfinsp/daemon/otlpexport"
	"perfinsp/daemon/otlpexport/otlptest"
)

func TestScratchProf(t *testing.T) {
	rcv := otlptest.Start(t)
	f, _ := os.Create("/tmp/cont.cpu")
	pprof.StartCPUProfile(f)
	stop := runAgent(t, Config{RateHz: 97, Interval: 15 * time.Second, Export: otlpexport.Config{Protocol: "http", Endpoint: rcv.HTTPURL}})
	time.Sleep(25 * time.Second)
	runtime.GC()
	h, _ := os.Create("/tmp/cont.heap")
	pprof.WriteHeapProfile(h)
	h.Close()
	st := stop()
	pprof.StopCPUProfile()
	f.Close()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("agent %d samples, heap %d MiB sys %d MiB", st.TotalSamples, ms.HeapAlloc>>20, ms.Sys>>20)
}
