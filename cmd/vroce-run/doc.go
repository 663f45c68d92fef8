// Command vroce-run runs an unmodified program over vRoCE:
//
//	vroce-run [--mode socket|cm] [--no-fallback] [--ports LIST] [--rules FILE] -- PROGRAM ARGS
//
// It starts vroced (beside it), puts the vroce-preload interposer
// (bin/libvroce-preload.so, or $VROCE_PRELOAD) into the program with
// LD_PRELOAD, runs it, and at its exit says how many connections and
// bytes went over vRoCE and over TCP, or plainly that the program was not
// interposed at all (a static or setuid binary, a Go program, io_uring).
// vroced outlives vroce-run while a process still uses it (a program
// that daemonizes). See package vroce.dev/preload.
package main
