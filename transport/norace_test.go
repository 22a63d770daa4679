//go:build !race

package device_test

// raceEnabled: built without -race (see race_test.go).
const raceEnabled = false
