// Package secrand draws unguessable numbers from the system's secure
// source, for what a hostile peer must not predict: memory keys, QPNs,
// initial PSNs, connection IDs (the ReDMArk threat model). vroce and its
// connection manager take them from here; simulations that want
// repeatable randomness seed their own generator instead.
package secrand
