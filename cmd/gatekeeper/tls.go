package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"gatekeeper/config"
)

// certCheckEvery is how often, at most, a handshake looks at the
// certificate files for a change: one stat of each file a second, however
// many connections arrive.
const certCheckEvery = time.Second

// certificate is the listener's certificate, read again from its files
// when they change (a renewal, a mounted secret updated), without a
// restart. A handshake serves the pair last read well: files that change
// into something that does not load are logged once and the previous
// pair stays.
type certificate struct {
	certFile, keyFile string
	log               *slog.Logger
	now               func() time.Time
	every             time.Duration

	cur     atomic.Pointer[tls.Certificate]
	mu      sync.Mutex // held by the one handshake that checks the files
	checked time.Time  // when the files were last looked at
	seen    fileStamps // the files as they were last read, well or not
}

// fileStamps tell the certificate files' versions apart.
type fileStamps [2]struct {
	mod  time.Time
	size int64
}

// newCertificate reads the pair tls names; it must load.
func newCertificate(t config.TLS, log *slog.Logger) (*certificate, error) {
	c := &certificate{certFile: t.CertFile, keyFile: t.KeyFile, log: log, now: time.Now, every: certCheckEvery}
	st, err := c.stamps()
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	pair, err := c.load()
	if err != nil {
		return nil, err
	}
	c.cur.Store(pair)
	c.seen, c.checked = st, c.now()
	return c, nil
}

// tlsConfig serves c over HTTP/1.1 (see serve).
func (c *certificate) tlsConfig() *tls.Config {
	return &tls.Config{GetCertificate: c.get, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
}

// get is tls.Config.GetCertificate: the current pair, after a look at the
// files when the last one is certCheckEvery old and no other handshake is
// looking. A handshake never waits for another.
func (c *certificate) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c.mu.TryLock() {
		if now := c.now(); now.Sub(c.checked) >= c.every {
			c.checked = now
			c.refresh()
		}
		c.mu.Unlock()
	}
	return c.cur.Load(), nil
}

// refresh reads the pair again when the files changed since last read.
// c.mu is held.
func (c *certificate) refresh() {
	st, err := c.stamps()
	if err != nil {
		if st != c.seen {
			c.seen = st
			c.log.Error("TLS certificate files cannot be read; serving the previous certificate", slog.String("error", err.Error()))
		}
		return
	}
	if st == c.seen {
		return
	}
	c.seen = st
	pair, err := c.load()
	if err != nil {
		c.log.Error("TLS certificate files changed and do not load; serving the previous certificate", slog.String("error", err.Error()))
		return
	}
	c.cur.Store(pair)
	c.log.Info("TLS certificate reloaded", slog.String("cert_file", c.certFile), slog.Time("not_after", pair.Leaf.NotAfter))
}

func (c *certificate) stamps() (fileStamps, error) {
	var st fileStamps
	for i, name := range []string{c.certFile, c.keyFile} {
		fi, err := os.Stat(name)
		if err != nil {
			return st, err
		}
		st[i].mod, st[i].size = fi.ModTime(), fi.Size()
	}
	return st, nil
}

// load reads the pair and its leaf; the key is never logged.
func (c *certificate) load() (*tls.Certificate, error) {
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: cert_file %s, key_file %s: %w", c.certFile, c.keyFile, err)
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tls: cert_file %s: %w", c.certFile, err)
		}
	}
	return &pair, nil
}
