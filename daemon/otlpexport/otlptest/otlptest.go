// Package otlptest is an OTLP profiles receiver for tests: OTLP/HTTP and
// OTLP/gRPC servers on the loopback that decode what they receive with the
// Collector's own pdata unmarshalers and keep it.
package otlptest

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
)

// Receiver holds what both servers received.
type Receiver struct {
	HTTPURL  string // http://127.0.0.1:PORT (posts go to /v1development/profiles)
	GRPCAddr string // 127.0.0.1:PORT

	mu       sync.Mutex
	got      []pprofile.Profiles
	bytes    int
	requests int
	auth     string        // the last request's Authorization
	status   int           // answer to HTTP requests (0: 200)
	hang     chan struct{} // while non-nil, requests wait on it
	changed  chan struct{}

	httpSrv *http.Server
	grpcSrv *grpc.Server
}

type grpcServer struct {
	pprofileotlp.UnimplementedGRPCServer
	r *Receiver
}

func (g *grpcServer) Export(ctx context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	if err := g.r.wait(ctx); err != nil {
		return pprofileotlp.NewExportResponse(), err
	}
	p := pprofile.NewProfiles()
	req.Profiles().CopyTo(p)
	g.r.add(p, 0)
	return pprofileotlp.NewExportResponse(), nil
}

// Start starts both servers; they stop at the test's end.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{changed: make(chan struct{})}
	if err := r.serve("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

func (r *Receiver) serve(httpAddr, grpcAddr string) error {
	hl, err := net.Listen("tcp", httpAddr)
	if err != nil {
		return err
	}
	gl, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		hl.Close()
		return err
	}
	r.HTTPURL, r.GRPCAddr = "http://"+hl.Addr().String(), gl.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("/v1development/profiles", r.serveHTTP)
	r.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	r.grpcSrv = grpc.NewServer()
	pprofileotlp.RegisterGRPCServer(r.grpcSrv, &grpcServer{r: r})
	go func() { _ = r.httpSrv.Serve(hl) }()
	go func() { _ = r.grpcSrv.Serve(gl) }()
	return nil
}

// Up serves again at the same addresses after Stop (a collector restarted).
func (r *Receiver) Up(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := r.serve(r.HTTPURL[len("http://"):], r.GRPCAddr)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("receiver: listen again: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop closes both servers (requests in flight are cut): the endpoint is
// down until Up.
func (r *Receiver) Stop() {
	r.SetHang(false)
	_ = r.httpSrv.Close()
	r.grpcSrv.Stop()
}

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if err := r.wait(req.Context()); err != nil {
		return
	}
	if err := pprofileotlp.ValidateDevelopmentVersion(req.Header.Values(pprofileotlp.DevelopmentVersionHeader)); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "POST application/x-protobuf only", http.StatusUnsupportedMediaType)
		return
	}
	r.mu.Lock()
	status := r.status
	r.auth = req.Header.Get("Authorization")
	r.mu.Unlock()
	if status != 0 {
		http.Error(w, http.StatusText(status), status)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	er := pprofileotlp.NewExportRequest()
	if err := er.UnmarshalProto(body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(er.Profiles(), len(body))
	out, _ := pprofileotlp.NewExportResponse().MarshalProto()
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (r *Receiver) wait(ctx context.Context) error {
	r.mu.Lock()
	h := r.hang
	r.mu.Unlock()
	if h == nil {
		return nil
	}
	select {
	case <-h:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Receiver) add(p pprofile.Profiles, n int) {
	r.mu.Lock()
	r.got = append(r.got, p)
	r.bytes += n
	r.requests++
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// Authorization is the Authorization header of the last HTTP request.
func (r *Receiver) Authorization() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.auth
}

// SetStatus makes the HTTP server answer status (0: accept again).
func (r *Receiver) SetStatus(status int) {
	r.mu.Lock()
	r.status = status
	r.mu.Unlock()
}

// SetHang makes both servers accept requests and never answer (until
// SetHang(false)).
func (r *Receiver) SetHang(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if on && r.hang == nil {
		r.hang = make(chan struct{})
	}
	if !on && r.hang != nil {
		close(r.hang)
		r.hang = nil
	}
}

// Received returns the requests received so far and their HTTP body bytes.
func (r *Receiver) Received() ([]pprofile.Profiles, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]pprofile.Profiles(nil), r.got...), r.bytes
}

// WaitFor waits until cond holds of what was received, or fails the test
// after timeout.
func (r *Receiver) WaitFor(t testing.TB, timeout time.Duration, what string, cond func([]pprofile.Profiles) bool) []pprofile.Profiles {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		got := append([]pprofile.Profiles(nil), r.got...)
		ch := r.changed
		r.mu.Unlock()
		if cond(got) {
			return got
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("receiver: %s not seen within %v (%d requests received)", what, timeout, len(got))
		}
	}
}
