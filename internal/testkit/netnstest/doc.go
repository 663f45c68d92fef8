// Package netnstest builds small test networks out of network namespaces
// and veth pairs, for tests that must cross a real kernel network path.
// They need root; in CI, which runs as root, a missing piece fails the test
// instead of skipping it.
package netnstest
