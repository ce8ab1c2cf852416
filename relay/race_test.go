//go:build race

package relay_test

// raceDetector: the tests were built with -race (see skipTimingUnderRace).
const raceDetector = true
