// Package coding reads a reply that a provider compressed: it decodes the
// content codings gatekeeper knows (gzip, deflate, br, zstd) as the reply
// is read, bounded by what its reader takes, and refuses any other, so
// that gatekeeper and the agent read the same bytes.
package coding

import (
	"bufio"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// gatekeeper asks providers for uncompressed replies (Accept-Encoding:
// identity), since it reads every reply as it streams; a provider may
// compress all the same. A reply in a content coding gatekeeper decodes
// is read, metered and gated in its decoded form, and the agent gets
// those decoded bytes: gatekeeper and the agent read the same bytes.
// A coding it does not decode would leave the reply unread, so it is
// refused.

var (
	// ErrCoding: the reply names a content coding gatekeeper does not
	// decode, or several stacked.
	ErrCoding = errors.New("coding: reply in a content coding gatekeeper does not decode")
	// ErrDecode: the reply's bytes are not valid in the content coding
	// it names.
	ErrDecode = errors.New("coding: reply bytes malformed for their content coding")
)

// Error is a reply's Content-Encoding that gatekeeper does not
// decode.
type Error struct {
	Coding string // as the provider wrote it, cut to maxCodingShown bytes
}

// maxCodingShown bounds how much of a provider's Content-Encoding an
// error repeats.
const maxCodingShown = 64

func (e *Error) Error() string {
	return fmt.Sprintf("coding: reply in content coding %q, which gatekeeper does not decode", e.Coding)
}

func (e *Error) Unwrap() error { return ErrCoding }

// The content codings gatekeeper decodes, by the names Coding returns.
const (
	Gzip    = "gzip"    // RFC 1952; x-gzip is the same
	Deflate = "deflate" // the zlib format (RFC 1950), as HTTP defines it
	Brotli  = "br"      // RFC 7932
	Zstd    = "zstd"    // RFC 8878, with HTTP's window bound (RFC 9659)
)

// maxZstdWindow is the largest zstd window a reply may use: 8 MiB, the
// bound of HTTP's zstd coding. It bounds what decoding one reply holds.
const maxZstdWindow = 8 << 20

// Coding is the content coding h's Content-Encoding names: "" for none
// (or identity), else Gzip, Deflate, Brotli or Zstd. Anything else, a
// list of several codings included, is a *Error.
func Of(h http.Header) (string, error) {
	var codings []string
	for _, v := range h.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.TrimSpace(c); c != "" {
				codings = append(codings, c)
			}
		}
	}
	if len(codings) == 0 {
		return "", nil
	}
	if len(codings) == 1 {
		switch c := strings.ToLower(codings[0]); c {
		case "identity":
			return "", nil
		case Gzip, "x-gzip":
			return Gzip, nil
		case Deflate, Brotli, Zstd:
			return c, nil
		}
	}
	shown := strings.Join(codings, ", ")
	if len(shown) > maxCodingShown {
		shown = shown[:maxCodingShown]
	}
	return "", &Error{Coding: shown}
}

// Decode makes resp's body its decoded bytes when its Content-Encoding
// names a coding gatekeeper decodes: the header goes, and with it
// Content-Length, which counted the encoded bytes. A reply without
// Content-Encoding, or in identity, is left as it is. Any other coding
// returns a *Error (ErrCoding) and leaves resp as it is.
//
// Decoding streams: the body's first Read reads the coding's header, and
// each Read hands out what the provider's bytes decode to so far, so an
// event the provider flushed comes out whole without waiting for the
// next. How many decoded bytes are read stays the reader's to bound, as
// for an uncompressed reply. A Read fails with the provider's own read
// error when its bytes stopped coming, else with ErrDecode when they are
// not valid in the coding (a truncated stream, bytes after its end
// included); it returns io.EOF only where the coding says the reply
// ends. Close closes the provider's body only, and may be called while a
// Read runs (Upstream's read aside).
func Decode(resp *http.Response) error {
	coding, err := Of(resp.Header)
	if err != nil || coding == "" {
		return err
	}
	resp.Body = &decoded{src: resp.Body, in: source{r: resp.Body}, coding: coding}
	resp.Header.Del("Content-Encoding")
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	resp.Uncompressed = true
	return nil
}

// decoded is a reply body decoded from coding.
type decoded struct {
	src    io.ReadCloser
	in     source // src, remembering how its reads failed
	coding string
	buf    *bufio.Reader // what the decoder reads from, for Deflate
	r      io.Reader     // the decoder, from the first Read
	zr     *zstd.Decoder // r for Zstd, released at the end
	err    error         // sticky
}

func (d *decoded) Read(p []byte) (int, error) {
	if d.err != nil {
		return 0, d.err
	}
	if d.r == nil {
		if err := d.open(); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // an empty body is no stream
			}
			return 0, d.end(err)
		}
	}
	n, err := d.r.Read(p)
	if err == io.EOF {
		err = d.ended()
	}
	if err != nil {
		return n, d.end(err)
	}
	return n, nil
}

// open makes the decoder; gzip's reads its header.
func (d *decoded) open() error {
	switch d.coding {
	case Gzip:
		zr, err := gzip.NewReader(&d.in)
		if err != nil {
			return err
		}
		d.r = zr
	case Deflate:
		// zlib reads from a bufio.Reader as it is, so what follows its
		// stream stays there to be checked.
		d.buf = bufio.NewReader(&d.in)
		zr, err := zlib.NewReader(d.buf)
		if err != nil {
			return err
		}
		d.r = zr
	case Brotli:
		d.r = brotli.NewReader(&d.in)
	case Zstd:
		// One decoder, in the reading goroutine: no goroutines of its own.
		zr, err := zstd.NewReader(&d.in, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(maxZstdWindow))
		if err != nil {
			return err
		}
		d.r, d.zr = zr, zr
	}
	return nil
}

// errTrailing: bytes follow the end of a compressed stream.
var errTrailing = errors.New("bytes follow the compressed stream")

// ended is the end of the decoded bytes: io.EOF, unless the body was
// empty or bytes follow the stream. gzip, brotli and zstd read on past a
// stream themselves (another member or frame, or an error); zlib stops
// at its stream's end.
func (d *decoded) ended() error {
	if d.in.n == 0 {
		return io.ErrUnexpectedEOF // an empty body holds no stream (zstd takes it for one of no frames)
	}
	if d.buf == nil {
		return io.EOF
	}
	switch _, err := d.buf.ReadByte(); err {
	case io.EOF:
		return io.EOF
	case nil:
		return errTrailing
	default:
		return err
	}
}

// end makes err the body's last answer and releases the decoder: the
// provider's read error as it came, or ErrDecode for bytes the coding
// does not accept.
func (d *decoded) end(err error) error {
	switch {
	case err == io.EOF:
	case d.in.err != nil:
		err = d.in.err
	default:
		err = fmt.Errorf("%w: %s: %w", ErrDecode, d.coding, err)
	}
	d.err = err
	if d.zr != nil {
		d.zr.Close()
		d.zr = nil
	}
	return err
}

// Close closes the provider's body; a Read running meanwhile ends with
// its error. The decoder is left to the reader (end).
func (d *decoded) Close() error { return d.src.Close() }

// source is a provider's body that remembers how much of it was read
// and how a read of it failed.
type source struct {
	r   io.Reader
	n   int64 // bytes read
	err error
}

func (s *source) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.n += int64(n)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}
