//go:build !linux

package sandbox

import "errors"

// Cgroups exist only on Linux; these keep the module building elsewhere.
func oomKills(string) int64       { return 0 }
func removeCgroup(string)         {}
func leftoverCgroups() []string   { return nil }
func MemoryInUse() (int64, error) { return 0, errors.New("memory figures need Linux cgroups") }
func setLimits(string, int64, float64, int64) error {
	return errors.New("resource limits need Linux cgroups")
}
