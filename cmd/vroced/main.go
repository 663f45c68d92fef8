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
