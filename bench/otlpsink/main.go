// Command otlpsink is a minimal OTLP profiles endpoint for the benchmark
// and for trying pitraced continuous without a collector: it accepts
// OTLP/HTTP profiles at /v1development/profiles (and, with -grpc, OTLP/gRPC),
// decodes them with the Collector's pdata unmarshalers, and at SIGTERM or
// SIGINT prints the requests, CPU samples and body bytes it received, the
// off-CPU time (profiles of sample type off_cpu), and the heaviest
// functions (innermost frame) of the CPU samples.
//
//	otlpsink -listen 127.0.0.1:4318 [-grpc 127.0.0.1:4317] [-top 10]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"sync"
	"syscall"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
)

type sink struct {
	mu                      sync.Mutex
	requests, samples, size int64
	offCPU                  int64 // ns
	leaf                    map[string]int64
}

func (s *sink) add(p pprofile.Profiles, n int) {
	d := p.Dictionary()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	s.size += int64(n)
	for i := 0; i < p.ResourceProfiles().Len(); i++ {
		rp := p.ResourceProfiles().At(i)
		exe, _ := rp.Resource().Attributes().Get("process.executable.name")
		for j := 0; j < rp.ScopeProfiles().Len(); j++ {
			profs := rp.ScopeProfiles().At(j).Profiles()
			for k := 0; k < profs.Len(); k++ {
				typ := ""
				if i := int(profs.At(k).SampleType().TypeStrindex()); i >= 0 && i < d.StringTable().Len() {
					typ = d.StringTable().At(i)
				}
				for x := 0; x < profs.At(k).Samples().Len(); x++ {
					smp := profs.At(k).Samples().At(x)
					var v int64
					for y := 0; y < smp.Values().Len(); y++ {
						v += smp.Values().At(y)
					}
					if typ == "off_cpu" {
						s.offCPU += v
						continue
					}
					s.samples += v
					st := d.StackTable().At(int(smp.StackIndex()))
					name := "?"
					if st.LocationIndices().Len() > 0 {
						loc := d.LocationTable().At(int(st.LocationIndices().At(0)))
						if loc.Lines().Len() > 0 {
							fn := d.FunctionTable().At(int(loc.Lines().At(0).FunctionIndex()))
							name = d.StringTable().At(int(fn.NameStrindex()))
						}
					}
					s.leaf[exe.AsString()+" "+name] += v
				}
			}
		}
	}
}

type grpcServer struct {
	pprofileotlp.UnimplementedGRPCServer
	s *sink
}

func (g *grpcServer) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	g.s.add(req.Profiles(), 0)
	return pprofileotlp.NewExportResponse(), nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:4318", "OTLP/HTTP address")
	grpcAddr := flag.String("grpc", "", "OTLP/gRPC address (none if empty)")
	top := flag.Int("top", 10, "functions to print")
	flag.Parse()
	s := &sink{leaf: map[string]int64{}}
	http.HandleFunc("/v1development/profiles", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req := pprofileotlp.NewExportRequest()
		if err := req.UnmarshalProto(body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.add(req.Profiles(), len(body))
		out, _ := pprofileotlp.NewExportResponse().MarshalProto()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	})
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "otlpsink:", err)
		os.Exit(1)
	}
	go func() { _ = http.Serve(l, nil) }()
	if *grpcAddr != "" {
		gl, err := net.Listen("tcp", *grpcAddr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "otlpsink:", err)
			os.Exit(1)
		}
		gs := grpc.NewServer()
		pprofileotlp.RegisterGRPCServer(gs, &grpcServer{s: s})
		go func() { _ = gs.Serve(gl) }()
	}
	fmt.Fprintf(os.Stderr, "otlpsink: listening on http://%s%s\n", l.Addr(), "/v1development/profiles")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Printf("requests %d samples %d bytes %d\n", s.requests, s.samples, s.size)
	if s.offCPU > 0 {
		fmt.Printf("off-CPU %.3f s\n", float64(s.offCPU)/1e9)
	}
	type kv struct {
		k string
		v int64
	}
	var all []kv
	for k, v := range s.leaf {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v > all[j].v })
	for i := 0; i < len(all) && i < *top; i++ {
		fmt.Printf("%6.1f%%  %s\n", 100*float64(all[i].v)/float64(max(s.samples, 1)), all[i].k)
	}
}
