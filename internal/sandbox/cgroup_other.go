//go:build !linux

package sandbox

// Cgroups exist only on Linux; these keep the module building elsewhere.
func oomKills(string) int64     { return 0 }
func removeCgroup(string)       {}
func leftoverCgroups() []string { return nil }
