// Package rtt is the module's one round-trip-time estimator: RFC 6298's
// smoothing at nanosecond resolution, with the least sample kept as the
// path's base RTT and the latest as the delay signal congestion control
// reacts to. vroce's RC requesters time their packets with it, the
// connection manager its exchanges; each puts its own timeouts on top.
package rtt
