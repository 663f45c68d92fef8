// Command vroced is the daemon vroce-run starts: it connects and listens
// for programs the vroce-preload interposer is in, and bridges their
// descriptors to rsock streams (see package vroce.dev/preload). It exits
// when no process uses it any more.
package main

import (
	"os"

	"vroce.dev/preload"
	_ "vroce.dev/providers/afxdp"
	"vroce.dev/providers/plugin" // VROCE_PROVIDER=plugin:NAME
	_ "vroce.dev/providers/udp"
)

func main() {
	code := preload.DaemonMain(os.Args[1:])
	plugin.Cleanup()
	os.Exit(code)
}
