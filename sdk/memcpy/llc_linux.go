package memcpy

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// lastLevelCache is the size in bytes of the highest-level data or
// unified cache of CPU 0, from sysfs, or 0 where it cannot be read (some
// containers and VMs show no cache directory).
func lastLevelCache() int {
	dirs, _ := filepath.Glob("/sys/devices/system/cpu/cpu0/cache/index*")
	level, size := 0, 0
	for _, d := range dirs {
		typ := readField(d, "type")
		if typ != "Unified" && typ != "Data" {
			continue
		}
		l, err := strconv.Atoi(readField(d, "level"))
		if err != nil || l < level {
			continue
		}
		if s := parseSize(readField(d, "size")); s > 0 {
			level, size = l, s
		}
	}
	return size
}

func readField(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// parseSize reads sysfs's cache size: a number of bytes with an optional
// K, M or G suffix ("491520K"); 0 if it is not one.
func parseSize(s string) int {
	mult := 1
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, s[:len(s)-1]
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, s[:len(s)-1]
	}
	v, err := strconv.Atoi(s)
	if err != nil || v <= 0 {
		return 0
	}
	return v * mult
}
