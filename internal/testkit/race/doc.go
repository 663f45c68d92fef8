// Package race says whether the race detector is built in: tests that
// count allocations allow for sync.Pool, which under it drops what it is
// given a quarter of the time on purpose (make test runs them again
// without it).
package race
