//go:build race

package transport_test

// raceEnabled: built with -race, whose sync.Pool drops items at random,
// so allocation counts include refills of the engine's buffer pools.
const raceEnabled = true
