// Command rsock-proxy puts vRoCE in front of programs that know only TCP,
// in any language, unchanged.
//
//	rsock-proxy --listen vroce://:9000 --to tcp://127.0.0.1:8080       # serve a TCP server over vRoCE
//	rsock-proxy --listen tcp://127.0.0.1:7000 --to vroce://HOST:9000   # reach it from a TCP client
//
// Each accepted connection gets its own connection to the target; bytes
// are copied both ways, and a half-close on either side is passed on, so
// request/response protocols that rely on it work. SIGTERM or SIGINT stops
// accepting, lets open connections finish for --drain, then closes them.
// SIGUSR1 prints every open connection, with its vRoCE stream's
// transport state (rsock.Info), to the log.
package main
