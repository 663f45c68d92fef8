// Package streamtest holds checks of byte streams (rsock's, or any
// net.Conn) shared by the tests of the layers that carry them, and a
// buffer a command or goroutine writes while a test reads it.
package streamtest
