// Command vroce-provider-udp serves the udp provider out of process:
// VROCE_PROVIDER=plugin:udp. "vroce-provider-udp describe" prints what it
// is as JSON.
package main
