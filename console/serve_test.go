package console_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/fairrelay/fairrelay/console"
	"github.com/fairrelay/fairrelay/internal/tlstest"
)

// Serve with a certificate and key serves HTTPS with that pair until ctx
// ends, then returns nil; a pair it cannot load is ErrCertificate, apart
// from a server's error, with nothing served and the listener closed.
func TestServeTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certPEM, keyPEM := tlstest.SelfSigned(t)
	cert, key, notPEM := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "not.pem")
	for p, b := range map[string][]byte{cert: certPEM, key: keyPEM, notPEM: []byte("not a certificate")} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "console") })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- console.Serve(ctx, ln, h, cert, key, nil) }()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := hc.Get("https://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatalf("GET over TLS: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "console" {
		t.Errorf("GET over TLS: %s %q", resp.Status, body)
	}
	hc.CloseIdleConnections()
	stop()
	if err := <-served; err != nil {
		t.Errorf("Serve after ctx ended: %v, want nil", err)
	}

	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	err = console.Serve(t.Context(), ln, h, notPEM, key, nil)
	if !errors.Is(err, console.ErrCertificate) {
		t.Errorf("Serve with a certificate file that is none: %v, want ErrCertificate", err)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the listener after Serve refused its pair: Accept %v, want it closed", err)
	}
}
