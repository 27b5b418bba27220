package otlpexport

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// HTTPPath is where OTLP/HTTP profiles are posted while the signal is in
// development (the Collector's OTLP receiver answers 404 at /v1/profiles).
const HTTPPath = "/v1development/profiles"

func tlsConfig(cfg Config) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s holds no PEM certificate", cfg.CAFile)
		}
		tc.RootCAs = pool
	}
	return tc, nil
}

type httpTransport struct {
	url     string
	headers map[string]string
	client  *http.Client
}

func newHTTP(cfg Config) (transport, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("endpoint %q: an OTLP/HTTP endpoint is a URL such as http://collector:4318", cfg.Endpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = HTTPPath
	}
	tc, err := tlsConfig(cfg)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{TLSClientConfig: tc, MaxIdleConns: 2, IdleConnTimeout: 90e9,
		// The endpoint is the configured one only: no proxy from the
		// environment, no redirect (below).
		Proxy: nil, ResponseHeaderTimeout: cfg.Timeout}
	return &httpTransport{url: u.String(), headers: cfg.Headers, client: &http.Client{Transport: tr, Timeout: cfg.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}, nil
}

func (t *httpTransport) send(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return permanentError{err}
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set(pprofileotlp.DevelopmentVersionHeader, pprofileotlp.DevelopmentVersion)
	for k, v := range t.headers {
		req.Header.Set(k, v)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return fmt.Errorf("POST %s: %w", t.url, err)
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_ = resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return nil
	}
	err = fmt.Errorf("POST %s: %s: %s", t.url, resp.Status, strings.TrimSpace(string(msg)))
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusRequestTimeout:
		return err
	}
	if resp.StatusCode/100 == 4 {
		return permanentError{err}
	}
	return err
}

func (t *httpTransport) close() error {
	t.client.CloseIdleConnections()
	return nil
}

type grpcTransport struct {
	conn    *grpc.ClientConn
	client  pprofileotlp.GRPCClient
	headers metadata.MD
}

func newGRPC(cfg Config) (transport, error) {
	if cfg.Endpoint == "" || strings.Contains(cfg.Endpoint, "/") {
		return nil, fmt.Errorf("endpoint %q: an OTLP/gRPC endpoint is host:port, such as collector:4317", cfg.Endpoint)
	}
	creds := insecure.NewCredentials()
	if !cfg.Insecure {
		tc, err := tlsConfig(cfg)
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(tc)
	}
	conn, err := grpc.NewClient(cfg.Endpoint, grpc.WithTransportCredentials(creds), grpc.WithNoProxy())
	if err != nil {
		return nil, fmt.Errorf("gRPC endpoint %s: %w", cfg.Endpoint, err)
	}
	md := metadata.MD{}
	for k, v := range cfg.Headers {
		md.Set(strings.ToLower(k), v)
	}
	return &grpcTransport{conn: conn, client: pprofileotlp.NewGRPCClient(conn), headers: md}, nil
}

func (t *grpcTransport) send(ctx context.Context, body []byte) error {
	req := pprofileotlp.NewExportRequest()
	if err := req.UnmarshalProto(body); err != nil {
		return permanentError{fmt.Errorf("queued request: %w", err)}
	}
	if len(t.headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, t.headers.Copy())
	}
	_, err := t.client.Export(ctx, req)
	if err == nil {
		return nil
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.Unimplemented, codes.PermissionDenied, codes.Unauthenticated, codes.FailedPrecondition:
		return permanentError{fmt.Errorf("gRPC export: %w", err)}
	}
	return fmt.Errorf("gRPC export: %w", err)
}

func (t *grpcTransport) close() error { return t.conn.Close() }
