//go:build !race

package transport_test

// raceEnabled: built without -race (see race_test.go).
const raceEnabled = false
