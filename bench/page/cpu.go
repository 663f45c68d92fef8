package main

import (
	"os"
	"strings"
)

// cpuName names this machine's CPU for the page's header, as
// /proc/cpuinfo's first processor gives it: the model name, and for x86
// the family and model numbers, which tell apart generations a model
// name such as "AMD EPYC" does not (the ratios moved by a factor of two
// between a first-generation Zen and a Zen 4 under that one name). ""
// when it cannot be read.
func cpuName() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	return cpuNameOf(string(b))
}

// cpuNameOf is cpuName for the text of /proc/cpuinfo.
func cpuNameOf(cpuinfo string) string {
	first, _, _ := strings.Cut(cpuinfo, "\n\n")
	fields := map[string]string{}
	for line := range strings.SplitSeq(first, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			fields[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	name := fields["model name"]
	if name == "" {
		return ""
	}
	if fam, model := fields["cpu family"], fields["model"]; fam != "" && model != "" {
		name += ", family " + fam + " model " + model
	}
	return name
}
