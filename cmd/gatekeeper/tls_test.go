package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"gatekeeper/config"
	"gatekeeper/mockprovider"
)

// testCert is a self-signed certificate for 127.0.0.1, as PEM files' bytes.
type testCert struct {
	der             []byte
	certPEM, keyPEM []byte
}

func newTestCert(t *testing.T, name string) testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return testCert{der: der, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})}
}

// write puts the pair in its files, the key first, each by a rename, as
// a renewal tool does.
func (c testCert) write(t *testing.T, certFile, keyFile string) {
	t.Helper()
	for _, f := range []struct {
		path string
		data []byte
	}{{keyFile, c.keyPEM}, {certFile, c.certPEM}} {
		tmp := f.path + ".new"
		if err := os.WriteFile(tmp, f.data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, f.path); err != nil {
			t.Fatal(err)
		}
	}
}

func (c testCert) pool(t *testing.T) *x509.CertPool {
	t.Helper()
	leaf, err := x509.ParseCertificate(c.der)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	p.AddCert(leaf)
	return p
}

// servedCert is the certificate a new TLS connection to addr is shown; it
// verifies nothing, since it is what is served that the test compares.
func servedCert(t *testing.T, addr string) []byte {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Raw
}

// TestTLSTurnAndCertificateReload serves a real turn over HTTPS with a
// certificate made here, to an SDK client trusting only it; then the
// files are replaced, and the new certificate is served without a
// restart, to a client trusting only the new one; files that change into
// something that does not load leave it served, with an error logged.
func TestTLSTurnAndCertificateReload(t *testing.T) {
	ms := httptest.NewServer(mockprovider.New(mockprovider.Options{}))
	defer ms.Close()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first, second := newTestCert(t, "first"), newTestCert(t, "second")
	first.write(t, certFile, keyFile)
	cfg := fmt.Sprintf(`
listen: 127.0.0.1:0
tls: {cert_file: %q, key_file: %q}
providers:
  - {name: anthropic, api: anthropic, base_url: %q, default: true, keys: [{name: k, key: sk-upstream-0001}]}
tenants:
  - {name: fleet, keys: [%s]}
log: {level: info, format: json}
`, certFile, keyFile, ms.URL, replicaKey)
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	rep := startReplica(t, path)
	addr := strings.TrimPrefix(rep.base, "http://")
	base := "https://" + addr
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	turn := func(trust testCert) error {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: trust.pool(t)}}}
		defer hc.CloseIdleConnections()
		c := anthropic.NewClient(option.WithBaseURL(base), option.WithAPIKey(replicaKey), option.WithMaxRetries(0), option.WithHTTPClient(hc))
		s := c.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("over tls"))}})
		defer s.Close()
		var m anthropic.Message
		for s.Next() {
			if err := m.Accumulate(s.Current()); err != nil {
				return err
			}
		}
		if err := s.Err(); err != nil {
			return err
		}
		if m.StopReason != anthropic.StopReasonEndTurn || len(m.Content) == 0 {
			return fmt.Errorf("reply %q %+v", m.StopReason, m.Content)
		}
		return nil
	}
	if err := turn(first); err != nil {
		t.Fatalf("a streamed turn over TLS: %v", err)
	}
	if err := turn(second); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client trusting another certificate: %v, want a certificate error", err)
	}
	if resp, err := http.Get(rep.base + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP served on the TLS listener")
		}
	}

	second.write(t, certFile, keyFile)
	served := servedCert(t, addr)
	for i := 0; i < 100 && !bytes.Equal(served, second.der); i++ {
		time.Sleep(50 * time.Millisecond)
		served = servedCert(t, addr)
	}
	if !bytes.Equal(served, second.der) {
		t.Fatal("the replaced certificate was not served within 5 s")
	}
	if err := turn(second); err != nil {
		t.Fatalf("a turn trusting the new certificate only: %v", err)
	}

	// Files that do not load keep the current pair.
	if err := os.WriteFile(certFile, []byte("-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100 && !strings.Contains(rep.logs.String(), "do not load; serving the previous certificate"); i++ {
		time.Sleep(50 * time.Millisecond)
		served = servedCert(t, addr)
	}
	if !strings.Contains(rep.logs.String(), "do not load; serving the previous certificate") {
		t.Fatalf("no error logged for a broken certificate:\n%s", tail(rep.logs.String()))
	}
	if !bytes.Equal(servedCert(t, addr), second.der) {
		t.Fatal("a broken certificate file replaced the served certificate")
	}
	if err := turn(second); err != nil {
		t.Fatalf("a turn after a broken certificate file: %v", err)
	}
}

// TestTLSStartRefusesBadFiles: a server whose certificate files do not
// load does not start.
func TestTLSStartRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	newTestCert(t, "a").write(t, certFile, keyFile)
	if err := os.WriteFile(keyFile, newTestCert(t, "b").keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := newCertificate(config.TLS{CertFile: certFile, KeyFile: keyFile}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "cert_file") {
		t.Fatalf("a key of another certificate: %v, want an error naming the files", err)
	}
}
