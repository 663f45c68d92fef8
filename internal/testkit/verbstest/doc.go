// Package verbstest holds the test harness shared by the packages that test
// through the verbs: open devices, connect an RC queue pair between them,
// wait for completions.
package verbstest
