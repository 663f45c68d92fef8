// Package unixsock is the Unix-socket plumbing that passes descriptors
// between processes: socketpairs whose one end this process keeps as a
// conn, SCM_RIGHTS parsed without trusting the sender, and conns made of
// descriptors. The plugin provider and vroced use it; it sits below both.
package unixsock
