package rsock

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Nothing above vroce's provider seam imports a provider: rsock, cm,
// netconn and preload link none of them (a program imports the ones it
// runs).
func TestLayersAboveTheSeamImportNoProvider(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("CI must list the import graph, but the go command is not on PATH")
		}
		t.Skip("the go command is not on PATH: the import graph cannot be listed")
	}
	for _, pkg := range []string{"vroce.dev/rsock", "vroce.dev/vroce/cm", "vroce.dev/netconn", "vroce.dev/vroce", "vroce.dev/preload"} {
		out, err := exec.Command(gobin, "list", "-deps", pkg).Output()
		require.NoError(t, err, pkg)
		for _, dep := range strings.Fields(string(out)) {
			assert.False(t, strings.HasPrefix(dep, "vroce.dev/providers/"), "%s imports %s", pkg, dep)
		}
	}
}

// A program that links no provider learns which import it lacks.
func TestAProviderNotLinkedIsNamed(t *testing.T) {
	_, err := (&ListenConfig{Provider: "nosuch"}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "import vroce.dev/providers/nosuch")
}
