//go:build !race

package consume_test

// raceDetector: the tests were built without -race.
const raceDetector = false
