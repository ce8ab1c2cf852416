package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fairrelay/fairrelay/internal/tlstest"
)

// A console whose certificate cannot be loaded when it begins to serve
// (the file changed after the start checked it: a rotation half written)
// exits 2 naming --tls-cert: `console` logged "console: server stopped"
// and exited 0, and `relay --console-addr` ran on without its console.
// The certificate and the key are named pipes whose reads the test
// answers one by one, in the order a load reads them (certificate, then
// key: alternating, a writer never joins the reader before): the start's
// two checks get the pair, the server's load a certificate that is none,
// so the change falls between them without a race.
func TestConsoleThatCannotServeStopsTheDaemon(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		args []string
	}{
		{"console", []string{"console", "--addr", "127.0.0.1:0"}},
		{"relay", []string{"relay", "--sink", "http://127.0.0.1:1/", "--console-addr", "127.0.0.1:0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			queue := filepath.Join(dir, "q.db")
			if _, errOut, code := cli(t, "", "migrate", "--queue", queue); code != 0 {
				t.Fatalf("migrate: %d %s", code, errOut)
			}
			certPEM, keyPEM := tlstest.SelfSigned(t)
			cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
			for _, p := range []string{cert, key} {
				if err := syscall.Mkfifo(p, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			fed := make(chan error, 1)
			go func() {
				for _, r := range []struct {
					path    string
					content []byte
				}{{cert, certPEM}, {key, keyPEM}, {cert, certPEM}, {key, keyPEM}, {cert, []byte("half a certificate")}, {key, keyPEM}} {
					f, err := os.OpenFile(r.path, os.O_WRONLY, 0) // waits for the child to open it
					if err != nil {
						fed <- err
						return
					}
					_, err = f.Write(r.content)
					if cerr := f.Close(); err == nil {
						err = cerr
					}
					if err != nil {
						fed <- err
						return
					}
				}
				fed <- nil
			}()
			t.Cleanup(func() {
				// A child that read the pipes fewer times leaves the
				// feeder waiting in its open: a reader lets it go.
				for _, p := range []string{cert, key} {
					if f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
						f.Close()
					}
				}
			})
			d := startCLI(t, append(c.args, "--queue", queue, "--tls-cert", cert, "--tls-key", key)...)
			select {
			case <-d.exited:
			case <-time.After(30 * time.Second):
				t.Fatalf("%s still runs 30 s after its console could not load its certificate:\n%s", c.name, d.stderr())
			}
			if err := <-fed; err != nil {
				t.Fatalf("feeding the certificate: %v", err)
			}
			const want = "fairrelay: invalid_input: tls-cert: the console could not serve: cannot load the TLS certificate and key: tls: failed to find any PEM data in certificate input"
			if d.code != exitFailed || !strings.Contains(d.stderr(), want) {
				t.Errorf("%s exited %d; want %d and %q in its stderr:\n%s", c.name, d.code, exitFailed, want, d.stderr())
			}
		})
	}
}
