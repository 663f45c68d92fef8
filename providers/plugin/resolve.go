//go:build linux

package plugin

import (
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// resolve finds the binary target names: a path (anything with a slash)
// as it is, a NAME as vroce-provider-NAME in each directory of
// $VROCE_PLUGIN_DIR, then beside the running executable. Never $PATH: a
// directory someone else can write to must not choose the code that
// moves this program's packets.
func resolve(target string) (string, error) {
	if target == "" {
		return "", fmt.Errorf("vroce plugin: no plugin named: use plugin:NAME or plugin:/path/to/binary")
	}
	if strings.ContainsRune(target, '/') {
		if err := executable(target); err != nil {
			return "", fmt.Errorf("vroce plugin: %s: %w", target, err)
		}
		return filepath.Abs(target)
	}
	var dirs []string
	for _, d := range filepath.SplitList(os.Getenv("VROCE_PLUGIN_DIR")) {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe))
	}
	var tried []string
	for _, d := range dirs {
		p := filepath.Join(d, binaryPrefix+target)
		if executable(p) == nil {
			return filepath.Abs(p)
		}
		tried = append(tried, p)
	}
	return "", fmt.Errorf("vroce plugin: %s%s not found (tried %s; $VROCE_PLUGIN_DIR, then beside the executable, never $PATH)", binaryPrefix, target, strings.Join(tried, ", "))
}

// executable says why path is not a regular file someone may execute.
func executable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("not an executable file (%v)", st.Mode())
	}
	return nil
}

// checksumOf is the SHA-256 a binary must have, from Options or else
// $VROCE_PLUGIN_SHA256; nil pins nothing.
func checksumOf(opt string) ([]byte, error) {
	if opt == "" {
		opt = os.Getenv("VROCE_PLUGIN_SHA256")
	}
	if opt == "" {
		return nil, nil
	}
	sum, err := hex.DecodeString(opt)
	if err != nil || len(sum) != 32 {
		return nil, fmt.Errorf("vroce plugin: checksum %q: want 64 hex digits of SHA-256", opt)
	}
	return sum, nil
}
