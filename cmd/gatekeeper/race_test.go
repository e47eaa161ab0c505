//go:build race

package main

// raceDetector: this test binary runs under the race detector, which
// allocates besides the code (and makes sync.Pool drop some of what it is
// given back).
const raceDetector = true
