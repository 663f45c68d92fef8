//go:build !race

package race

// Enabled is whether the race detector is built in.
const Enabled = false
