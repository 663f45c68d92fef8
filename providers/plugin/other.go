//go:build !linux

package plugin

import (
	"fmt"
	"os"
)

// Main says that plugins need Linux: the rings are a sealed memfd and
// eventfds, and their descriptors cross by SCM_RIGHTS.
func Main(desc Description) {
	fmt.Fprintf(os.Stderr, "%s%s: provider plugins need Linux\n", binaryPrefix, desc.Name)
	os.Exit(1)
}

// Cleanup has no plugins to stop.
func Cleanup() {}
