// Package streamtest holds what the tests of the streaming tree share,
// whichever of its packages they run in: feeding a stream to a dialect's
// decoder in the pieces a network may cut it into, the property that the
// result does not depend on the cuts, seeding fuzz targets with a testdata
// directory, the check that every golden stream has its case, and what a
// stream says read apart from the decoders (Says, one reader an API, since
// that reading must not share code with the decoders it checks). It takes
// a dialect as a value; only tests import it.
package streamtest
