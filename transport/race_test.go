//go:build race

package device_test

// raceEnabled: built with -race, whose sync.Pool drops items at random,
// so allocation counts include refills of the engine's buffer pools.
const raceEnabled = true
