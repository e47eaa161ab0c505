package mockprovider

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"net/http"
	"slices"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// Codings are the content codings a turn's Encoding compresses with.
var Codings = []string{"gzip", "deflate", "br", "zstd"}

// Encoding faults (TurnSpec.EncodingFault).
const (
	FaultCut   = "cut"   // the compressed bytes end halfway, the body cleanly
	FaultPlain = "plain" // the reply goes uncompressed under its Content-Encoding
)

// compressor is a coding's writer, which can hand out what it has so far.
type compressor interface {
	io.WriteCloser
	Flush() error
}

// newCompressor writes coding to w; nil for a coding the mock does not
// compress with.
func newCompressor(coding string, w io.Writer) compressor {
	switch coding {
	case "gzip":
		return gzip.NewWriter(w)
	case "deflate":
		return zlib.NewWriter(w) // HTTP's deflate is the zlib format
	case "br":
		return brotli.NewWriter(w)
	case "zstd":
		// One goroutine: the stream's own. An encoder's options are fixed.
		zw, _ := zstd.NewWriter(w, zstd.WithEncoderConcurrency(1))
		return zw
	}
	return nil
}

// Compress is chunks in coding (one of Codings), each flushed, so that a
// decoder can hand out each as soon as it has its bytes.
func Compress(coding string, chunks ...[]byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := newCompressor(coding, &buf)
	if zw == nil {
		return nil, fmt.Errorf("mock provider: no compressor for %q", coding)
	}
	for _, c := range chunks {
		if _, err := zw.Write(c); err != nil {
			return nil, err
		}
		if err := zw.Flush(); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// encoder is how a reply's bytes are encoded: its turn's Encoding and
// EncodingFault.
type encoder struct {
	coding string // "" when the turn names none
	fault  string
}

func (e encoder) compresses() bool {
	return e.coding != "" && e.fault != FaultPlain && slices.Contains(Codings, e.coding)
}

// body is a whole body as the encoder sends it, and sets its header on h.
func (e encoder) body(h http.Header, body []byte) []byte {
	if e.coding == "" {
		return body
	}
	h.Set("Content-Encoding", e.coding)
	if !e.compresses() {
		return body
	}
	z, err := Compress(e.coding, body)
	if err != nil {
		panic(err) // writes to a bytes.Buffer do not fail
	}
	if e.fault == FaultCut {
		z = z[:len(z)/2]
	}
	return z
}

// eventWriter writes a stream's events, in the encoder's coding: each
// event compressed and flushed on its own, so that a client decodes each
// as it comes.
type eventWriter struct {
	w   io.Writer
	zw  compressor
	buf bytes.Buffer // what zw has for w
	cut bool         // FaultCut: the write that ends it
}

// events starts the encoder's stream on w, with its header on h.
func (e encoder) events(h http.Header, w io.Writer) *eventWriter {
	ew := &eventWriter{w: w}
	if e.coding == "" {
		return ew
	}
	h.Set("Content-Encoding", e.coding)
	if e.compresses() {
		ew.zw = newCompressor(e.coding, &ew.buf)
		ew.cut = e.fault == FaultCut
	}
	return ew
}

// write sends b; cut is a FaultCut stream's last write, which ends
// after half of b's compressed bytes.
func (ew *eventWriter) write(b []byte, cut bool) error {
	if ew.zw == nil {
		_, err := ew.w.Write(b)
		return err
	}
	_, _ = ew.zw.Write(b) // writes to a bytes.Buffer do not fail
	_ = ew.zw.Flush()
	z := ew.buf.Bytes()
	if cut {
		z = z[:len(z)/2]
	}
	_, err := ew.w.Write(z)
	ew.buf.Reset()
	return err
}

// close ends the compressed stream.
func (ew *eventWriter) close() error {
	if ew.zw == nil {
		return nil
	}
	_ = ew.zw.Close()
	_, err := ew.w.Write(ew.buf.Bytes())
	return err
}
