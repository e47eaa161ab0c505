// Package jsonscan reads and edits JSON in place for the streaming tree: the
// one scanner (scan.go) that walks members and elements of valid JSON as
// substrings of the text, decoding strings only where a value is needed;
// the span editor (edit.go) that rewrites a request body by replacing byte
// ranges, so every untouched byte stays as it came; and the writers
// (write.go) that rebuild an object or event member by member. It knows no
// API.
package jsonscan
