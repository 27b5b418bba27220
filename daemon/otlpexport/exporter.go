package otlpexport

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
)

// Config says where and how to send.
type Config struct {
	// Protocol is "http" (OTLP/HTTP, protobuf body) or "grpc".
	Protocol string
	// Endpoint: for http a URL (http://host:4318 sends to
	// /v1development/profiles, a URL with a path is used as it is); for
	// grpc host:port.
	Endpoint string
	// Insecure sends gRPC without TLS (http follows the URL's scheme).
	Insecure bool
	// CAFile is a PEM bundle to verify the endpoint with (default: the
	// system's roots).
	CAFile string
	// Headers are added to every request (Authorization: Bearer ...).
	Headers map[string]string
	// Timeout bounds one request (default 10 s).
	Timeout time.Duration
	// QueueBytes bounds the marshalled profiles waiting in memory
	// (default 16 MiB); SpoolDir and SpoolBytes the ones on disk (no
	// spool without SpoolDir; default 256 MiB).
	QueueBytes int64
	SpoolDir   string
	SpoolBytes int64
	// BackoffMin and BackoffMax bound the wait between attempts while
	// the endpoint fails (defaults 1 s and 60 s).
	BackoffMin, BackoffMax time.Duration
}

// Stats are the exporter's counts since it started.
type Stats struct {
	Sent, SentSamples       uint64 // requests and samples delivered
	SentBytes               uint64 // their bodies' bytes
	Dropped, DroppedSamples uint64 // requests and samples given up: bounds full or rejected
	Rejected                uint64 // of Dropped, requests the endpoint refused as bad
	Failures                uint64 // attempts that failed and will be retried
	Queued, Spooled         int    // requests waiting (of them on disk)
	QueuedBytes, SpoolBytes int64
	LastError               string
}

// transport sends one marshalled request; a permanent error means the
// request itself was refused and is not retried.
type transport interface {
	send(ctx context.Context, body []byte) error
	close() error
}

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Exporter queues profiles and sends them from one goroutine (Run).
type Exporter struct {
	cfg  Config
	tr   transport
	mu   sync.Mutex
	q    queue
	st   Stats
	wake chan struct{}
}

// New checks the configuration and connects nothing yet.
func New(cfg Config) (*Exporter, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.QueueBytes <= 0 {
		cfg.QueueBytes = 16 << 20
	}
	if cfg.SpoolBytes <= 0 {
		cfg.SpoolBytes = 256 << 20
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = time.Second
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = max(60*time.Second, cfg.BackoffMin)
	}
	e := &Exporter{cfg: cfg, wake: make(chan struct{}, 1)}
	e.q.maxMem, e.q.maxDisk = cfg.QueueBytes, cfg.SpoolBytes
	var err error
	switch cfg.Protocol {
	case "http", "":
		e.tr, err = newHTTP(cfg)
	case "grpc":
		e.tr, err = newGRPC(cfg)
	default:
		err = fmt.Errorf("protocol %q: use http or grpc", cfg.Protocol)
	}
	if err != nil {
		return nil, err
	}
	if cfg.SpoolDir != "" {
		if err := e.q.openSpool(cfg.SpoolDir); err != nil {
			e.tr.close()
			return nil, err
		}
	}
	return e, nil
}

// Enqueue marshals p and queues it; it never blocks on the network.
// samples is the number of samples p holds (for the drop counts).
func (e *Exporter) Enqueue(p pprofile.Profiles, samples int64) error {
	body, err := pprofileotlp.NewExportRequestFromProfiles(p).MarshalProto()
	if err != nil {
		return fmt.Errorf("marshal profiles: %w", err)
	}
	e.mu.Lock()
	dropped := e.q.push(body, samples)
	for _, it := range dropped {
		e.st.Dropped++
		e.st.DroppedSamples += uint64(it.samples)
	}
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return nil
}

// Stats returns the counts now.
func (e *Exporter) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.st
	st.Queued, st.Spooled = e.q.len(), len(e.q.spool)
	st.QueuedBytes, st.SpoolBytes = e.q.memBytes, e.q.diskBytes
	return st
}

// Run sends queued requests until ctx ends.
func (e *Exporter) Run(ctx context.Context) {
	backoff := time.Duration(0)
	for {
		if backoff > 0 {
			t := time.NewTimer(backoff + rand.N(backoff/4+1))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		ok, more := e.sendOne(ctx)
		switch {
		case !ok:
			backoff = min(max(2*backoff, e.cfg.BackoffMin), e.cfg.BackoffMax)
		case more:
			backoff = 0
		default:
			backoff = 0
			select {
			case <-ctx.Done():
				return
			case <-e.wake:
			}
		}
	}
}

// Flush sends what is queued until the queue is empty, an attempt fails or
// ctx ends (at shutdown); what is left stays in the spool when there is one.
func (e *Exporter) Flush(ctx context.Context) {
	for ctx.Err() == nil {
		ok, more := e.sendOne(ctx)
		if !ok || !more {
			return
		}
	}
}

// Close spools what is still in memory (with a spool directory) and
// closes the connection.
func (e *Exporter) Close() error {
	e.mu.Lock()
	for len(e.q.mem) > 0 {
		it := e.q.mem[0]
		e.q.mem = e.q.mem[1:]
		e.q.memBytes -= it.size
		for _, d := range e.q.spill(it) {
			e.st.Dropped++
			e.st.DroppedSamples += uint64(d.samples)
		}
	}
	e.mu.Unlock()
	return e.tr.close()
}

// sendOne sends the oldest request: ok false when the attempt failed (to
// be retried), more whether requests are left.
func (e *Exporter) sendOne(ctx context.Context) (ok, more bool) {
	e.mu.Lock()
	it, err := e.q.head()
	if it == nil {
		e.mu.Unlock()
		return true, false
	}
	if err != nil {
		// A spool file that cannot be read back is dropped.
		e.q.remove(it)
		e.st.Dropped++
		e.st.DroppedSamples += uint64(it.samples)
		e.st.LastError = err.Error()
		more = e.q.len() > 0
		e.mu.Unlock()
		return true, more
	}
	body := it.body
	e.mu.Unlock()

	// A request once started runs to its answer or its timeout: cut short
	// when Run stops, it could have reached the collector and be sent
	// again by Flush (a duplicate).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.Timeout)
	err = e.tr.send(sctx, body)
	cancel()

	e.mu.Lock()
	defer e.mu.Unlock()
	var perm permanentError
	switch {
	case err == nil:
		e.st.Sent++
		e.st.SentSamples += uint64(it.samples)
		e.st.SentBytes += uint64(len(body))
	case errors.As(err, &perm):
		e.st.Dropped++
		e.st.Rejected++
		e.st.DroppedSamples += uint64(it.samples)
		e.st.LastError = err.Error()
	default:
		e.st.Failures++
		e.st.LastError = err.Error()
		e.q.dropSpoolBody(it)
		return false, true
	}
	// The item may have been spilled to disk while it was being sent:
	// remove finds it at the head of either list.
	if len(e.q.spool) > 0 && e.q.spool[0].seq == it.seq {
		e.q.remove(e.q.spool[0])
	} else {
		e.q.remove(it)
	}
	return true, e.q.len() > 0
}
