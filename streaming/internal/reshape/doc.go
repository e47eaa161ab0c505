// Package reshape holds what reshaping whole held replies shares across
// APIs (AssembleJSON, SpliceStream, SpliceJSON of each dialect): a whole
// stream read into its events, and usage summed over two replies. It
// knows no API of its own.
package reshape
