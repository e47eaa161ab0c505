// Package purity holds the test that keeps gatekeeper's pure packages
// (trajectory, streaming, meter, report) pure: no imports of I/O or of the
// adapters, no package state. It has no code of its own.
package purity
