//go:build race

package consume_test

// raceDetector: the tests were built with -race (see
// TestRunALongHeldRunHoldsUpNoOther).
const raceDetector = true
