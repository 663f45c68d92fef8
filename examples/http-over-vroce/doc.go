// Command http-over-vroce serves net/http on an rsock listener and fetches
// from it with an http.Transport that dials with rsock, over HTTP/1.1 and
// unencrypted HTTP/2, then runs the same workload over kernel TCP and
// prints both side by side.
//
//	go run ./examples/http-over-vroce -requests 2000 -concurrency 8
//
// The point is how little changes: the server is an ordinary http.Server
// given rsock.Listen's listener, and the client an ordinary http.Client
// whose Transport dials with rsock.
package main
