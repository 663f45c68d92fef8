package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"vroce.dev/vroce"
)

// refusals are what a device refused, by counter, without the zeros: the
// hostile or broken packets a run met (SECURITY in the README).
func refusals(d vroce.DeviceStats) map[string]uint64 {
	all := map[string]uint64{
		"bad_icrc":         d.RxBadICRC,
		"bad_pkey":         d.RxBadPKey,
		"malformed":        d.RxMalformed,
		"no_qp":            d.RxNoQP,
		"provider_drops":   d.RxProviderDrops,
		"wrong_source":     d.QPs.WrongSource,
		"forged_responses": d.QPs.ForgedResponses,
		"held_drops":       d.QPs.HeldDrops,
		"dup_read_limited": d.QPs.DupReadLimited,
		"reads_refused":    d.QPs.ReadsRefused,
	}
	for k, v := range all {
		if v == 0 {
			delete(all, k)
		}
	}
	if len(all) == 0 {
		return nil
	}
	return all
}

// addRefusal adds a counter of another layer's (rsock, cm) to m, if it
// moved.
func addRefusal(m *map[string]uint64, name string, v uint64) {
	if v == 0 {
		return
	}
	if *m == nil {
		*m = map[string]uint64{}
	}
	(*m)[name] = v
}

// printRefusals writes the refusals as one line, if there are any.
func printRefusals(w io.Writer, r map[string]uint64) {
	if len(r) == 0 {
		return
	}
	names := make([]string, 0, len(r))
	for k := range r {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %d", k, r[k])
	}
	fmt.Fprintf(w, " refused: %s\n", strings.Join(parts, ", "))
}
