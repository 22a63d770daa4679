//go:build !race

package transport

// raceEnabled: built without -race (see race_test.go).
const raceEnabled = false
