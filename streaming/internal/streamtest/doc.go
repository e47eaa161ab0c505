// Package streamtest holds what the tests of the streaming tree share,
// whichever package they run in: feeding a stream to a dialect's decoder
// in the pieces a network may cut it into, the property that the result
// does not depend on the cuts, seeding fuzz targets with a testdata
// directory, and what a test compares with. It takes a dialect as a
// value and knows no API of its own; only tests import it.
package streamtest
