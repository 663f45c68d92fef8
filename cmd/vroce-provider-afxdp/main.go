package main

import (
	_ "vroce.dev/providers/afxdp"
	"vroce.dev/providers/plugin"
)

func main() {
	plugin.Main(plugin.Description{Name: "afxdp", Needs: []string{"CAP_NET_RAW", "CAP_NET_ADMIN", "CAP_BPF", "CAP_IPC_LOCK"}})
}
