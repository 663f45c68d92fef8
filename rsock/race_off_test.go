//go:build !race

package rsock

const raceEnabled = false
