//go:build race

package rsock

const raceEnabled = true
