// Command vroced is the daemon vroce-run starts: it connects and listens
// for programs the vroce-preload interposer is in, and bridges their
// descriptors to rsock streams (see package vroce.dev/preload). It exits
// when no process uses it any more.
package main
