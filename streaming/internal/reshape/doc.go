// Package reshape holds what reshaping whole replies shares across APIs
// (AssembleJSON, SpliceStream, SpliceJSON, RenderSSE of each dialect): a
// reply body read as one JSON object (ReplyObject), a whole stream read
// into its events, usage summed over two replies, the shells of a body
// splice (SpliceJSON) and of a rendering (Render). It knows no API of its
// own.
package reshape
