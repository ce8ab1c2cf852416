//go:build race

package fairrelay_test

// raceDetector: the tests were built with -race (see forWorkloads).
const raceDetector = true
