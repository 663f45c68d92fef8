// Package ttlmap keeps answers for a while: a map whose entries count for
// a time after they are put, holding at most a bounded number. vRoCE uses
// it where asking again costs a system call or a round trip and a stale
// answer for a second is harmless: the routing table's source address
// (vroce.RouteSource), the services a connection manager reached lately
// (rsock's CM dial). The time is passed in, so tests set it exactly.
package ttlmap
