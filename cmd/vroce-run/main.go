package main

import (
	"os"

	"vroce.dev/preload"
)

func main() { os.Exit(preload.RunMain(os.Args[1:])) }
