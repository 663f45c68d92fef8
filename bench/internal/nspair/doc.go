// Package nspair makes the benchmark of record's link: two network
// namespaces joined by a veth pair, the way two hosts see each other. It
// needs root and ip(8); the benchmark commands use it.
package nspair
