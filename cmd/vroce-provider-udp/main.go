package main

import (
	"vroce.dev/providers/plugin"
	_ "vroce.dev/providers/udp"
)

func main() { plugin.Main(plugin.Description{Name: "udp"}) }
