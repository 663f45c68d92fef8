// Command vroce-provider-udp serves the udp provider out of process:
// VROCE_PROVIDER=plugin:udp. "vroce-provider-udp describe" prints what it
// is as JSON.
package main

import (
	"vroce.dev/providers/plugin"
	_ "vroce.dev/providers/udp"
)

func main() { plugin.Main(plugin.Description{Name: "udp"}) }
