//go:build race

package vroce_test

const raceEnabled = true
