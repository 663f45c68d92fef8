// Command grpc-over-vroce serves gRPC on an rsock listener and calls it
// through grpc.WithContextDialer with rsock: unary, server-streaming,
// client-streaming and bidirectional calls, and the standard health
// service; then the same over kernel TCP, side by side.
//
//	go run ./examples/grpc-over-vroce -calls 2000 -concurrency 8
//
// The server is an ordinary grpc.Server given rsock.Listen's listener; the
// client an ordinary grpc.ClientConn whose dialer is rsock's. (The demo
// service is declared by hand with a JSON codec so that the example needs
// no generated code; any protobuf service works the same way.)
package main
